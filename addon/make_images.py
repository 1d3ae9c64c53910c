"""Draw the add-on's icon.png (128x128) and logo.png (250x100); run by hand when the design changes.

    python addon/make_images.py      # needs Pillow, which only this script uses

A speech bubble holding a sound wave: speech in and out. Drawn at 4x and scaled down for smooth edges.
"""

from __future__ import annotations

import math
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).resolve().parent
SCALE = 4
TOP, BOTTOM = (32, 178, 170), (21, 101, 192)  # teal to blue
WHITE = (255, 255, 255, 255)


def _gradient(size: tuple[int, int]) -> Image.Image:
    width, height = size
    image = Image.new("RGBA", size)
    for y in range(height):
        t = y / max(1, height - 1)
        color = tuple(round(a + (b - a) * t) for a, b in zip(TOP, BOTTOM, strict=True)) + (255,)
        ImageDraw.Draw(image).line([(0, y), (width, y)], fill=color)
    return image


def _mark(side: int) -> Image.Image:
    """The square mark: a rounded tile with a bubble and a wave, `side` pixels wide."""
    big = side * SCALE
    tile = _gradient((big, big))
    mask = Image.new("L", (big, big))
    ImageDraw.Draw(mask).rounded_rectangle([0, 0, big - 1, big - 1], radius=big // 5, fill=255)
    mark = Image.new("RGBA", (big, big))
    mark.paste(tile, mask=mask)
    draw = ImageDraw.Draw(mark)
    # Speech bubble with a tail at the bottom left.
    left, top, right, bottom = big * 0.16, big * 0.2, big * 0.84, big * 0.7
    draw.rounded_rectangle([left, top, right, bottom], radius=big * 0.12, fill=WHITE)
    draw.polygon([(big * 0.28, bottom - 2), (big * 0.24, big * 0.84), (big * 0.44, bottom - 2)], fill=WHITE)
    # Sound wave: bars whose heights follow a damped cosine, in the tile's blue.
    bars, middle = 7, (top + bottom) / 2
    bar_width = (right - left) * 0.6 / (bars * 2 - 1)
    start = (left + right) / 2 - bar_width * (bars * 2 - 1) / 2
    for index in range(bars):
        offset = index - bars // 2
        height = (bottom - top) * (0.18 + 0.5 * math.cos(offset * 0.55) ** 2 * math.exp(-abs(offset) * 0.18))
        x = start + index * 2 * bar_width
        draw.rounded_rectangle(
            [x, middle - height / 2, x + bar_width, middle + height / 2], radius=bar_width / 2, fill=BOTTOM + (255,)
        )
    return mark.resize((side, side), Image.LANCZOS)


def icon() -> Image.Image:
    return _mark(128)


def logo() -> Image.Image:
    width, height = 250, 100
    image = Image.new("RGBA", (width * SCALE, height * SCALE))
    mark = _mark(84).resize((84 * SCALE, 84 * SCALE), Image.LANCZOS)
    image.paste(mark, (8 * SCALE, 8 * SCALE), mark)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=30 * SCALE)
    draw.text((102 * SCALE, 22 * SCALE), "wyoming", font=font, fill=BOTTOM + (255,))
    draw.text((102 * SCALE, 54 * SCALE), "wis", font=font, fill=TOP + (255,))
    return image.resize((width, height), Image.LANCZOS)


if __name__ == "__main__":
    icon().save(HERE / "icon.png", optimize=True)
    logo().save(HERE / "logo.png", optimize=True)
    print(f"wrote {HERE / 'icon.png'} and {HERE / 'logo.png'}")
