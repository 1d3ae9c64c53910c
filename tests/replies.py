"""What Home Assistant says back, as it words it: the texts every test of speech must get audio for.

Its intent responses and errors ("Turned on the light", "Sorry, I couldn't understand
that") have no final full stop; an LLM agent's may end in a space, an emoji or run over
several lines. Shared by the main suite and tests/ha, with how to compare what was heard.
"""

import re

REPLIES = [
    "Turned on the light",
    "OK",
    "Done",
    "The time is 3:45 PM",
    "Sorry, I couldn't understand that",
    "Turned off the fan ",
    "The front door is locked\n",
    "Turned on the light\nThe heating is set to 21 degrees",
    "42",
    "All done 👍",
]
# Texts with nothing to say: refused with an error, never answered with silence.
NOTHING_TO_SAY = ["...", " ?! ", "🙂", "👍🏽\n"]


_SAME = {"okay": "ok"}


def words(text: str) -> list[str]:
    """Words, lowercased, without punctuation, as Whisper may write them: '3:45 PM', '3.45 p.m.' and '3.45pm' are all
    '345 pm', 'Okay' is 'ok'; letters with full stops are one word ('p.n.', a misheard 'PM', is one word wrong)."""
    text = re.sub(r"\b([a-z])\.([a-z])\.", r"\1\2", text.lower())
    text = re.sub(r"(\d)[:.](\d)", r"\1\2", text)  # a time's separator
    text = re.sub(r"(\d)([a-z])", r"\1 \2", text)  # 45pm
    return [_SAME.get(word, word) for word in re.sub(r"[^\w\s']", " ", text).split()]
