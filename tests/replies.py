"""What Home Assistant says back, as it words it: the texts every test of speech must get audio for.

Its intent responses and errors ("Turned on the light", "Sorry, I couldn't understand
that") have no final full stop; an LLM agent's may end in a space, an emoji or run over
several lines. Shared by the main suite and tests/ha.
"""

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
