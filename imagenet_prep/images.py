"""Pure image functions for the converter: resize specs, re-encoding, bounding-box XML.

Formats are detected from the bytes, never from the file name: ImageNet holds a PNG named `.JPEG`
and CMYK JPEGs, and TensorFlow's JPEG decoder wants RGB JPEG.
"""
from __future__ import annotations

import dataclasses
import io
import re
import xml.etree.ElementTree as ET

import numpy as np
from PIL import Image, UnidentifiedImageError

_RESIZE_RE = re.compile(r"^(?:(none)|shorter:(\d+)|stretch:(\d+)x(\d+))$")


@dataclasses.dataclass(frozen=True)
class ResizeSpec:
    """How to pre-resize. mode 'shorter': cap the shorter side at `size` keeping the aspect ratio
    (upscale smaller images only if `upscale`); 'stretch': exactly width x height; 'none'."""

    mode: str
    size: int = 0
    width: int = 0
    height: int = 0
    upscale: bool = False

    def __str__(self):
        if self.mode == "shorter":
            return f"shorter:{self.size}" + (" (upscale)" if self.upscale else "")
        return f"stretch:{self.width}x{self.height}" if self.mode == "stretch" else "none"

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of the stored image for an input of width x height."""
        if self.mode == "stretch":
            return self.width, self.height
        shorter = min(width, height)
        if self.mode == "none" or (shorter <= self.size and not self.upscale):
            return width, height
        scale = self.size / shorter
        return max(1, round(width * scale)), max(1, round(height * scale))


def parse_resize(spec: str, upscale: bool = False) -> ResizeSpec:
    """'shorter:480', 'stretch:352x352' or 'none'."""
    match = _RESIZE_RE.match(spec.strip().lower())
    if not match or any(g is not None and int(g) < 1 for g in match.groups()[1:]):
        raise ValueError(f"unknown resize spec: {spec!r}; use 'shorter:N' (e.g. shorter:480), "
                         f"'stretch:WxH' (e.g. stretch:352x352) or 'none'")
    none, size, width, height = match.groups()
    if none:
        return ResizeSpec("none")
    if size:
        return ResizeSpec("shorter", size=int(size), upscale=upscale)
    return ResizeSpec("stretch", width=int(width), height=int(height))


@dataclasses.dataclass(frozen=True)
class ConvertedImage:
    jpeg: bytes
    width: int
    height: int
    source_format: str  # what the bytes were: JPEG, PNG, ...
    source_mode: str  # Pillow mode of the source: RGB, CMYK, L, ...
    reencoded: bool


def convert_image(data: bytes, resize: ResizeSpec, quality: int) -> ConvertedImage:
    """Decodes `data` fully (so a truncated or corrupt file raises here, not at training time), and
    returns an RGB JPEG of the target size. An RGB JPEG that needs no resize keeps its original bytes:
    re-encoding would only lose quality."""
    with _open(data) as image:
        source_format, source_mode, source_size = image.format or "unknown", image.mode, image.size
        target = resize.target_size(*source_size)
        if source_format == "JPEG" and target != source_size:
            # Let libjpeg decode at 1/2, 1/4 or 1/8 scale when that still covers the target: much faster.
            image.draft(image.mode, target)
        image.load()
        if source_format == "JPEG" and source_mode == "RGB" and target == source_size:
            return ConvertedImage(data, target[0], target[1], source_format, source_mode, reencoded=False)
        rgb = _to_rgb(image)
        if rgb.size != target:
            rgb = rgb.resize(target, Image.BICUBIC, reducing_gap=3.0)
        out = io.BytesIO()
        rgb.save(out, "JPEG", quality=quality)
        return ConvertedImage(out.getvalue(), target[0], target[1], source_format, source_mode, reencoded=True)


def _open(data: bytes) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        # Pillow's own message names only the address of the in-memory buffer; the converter's report names the file
        raise UnidentifiedImageError(
            f"not an image format Pillow reads ({len(data):,} bytes, starting {data[:8]!r})") from None


def _to_rgb(image: Image.Image) -> Image.Image:
    """RGB; transparent pixels become white rather than whatever colour hides under alpha 0, and 16-bit grey
    is scaled to 8 bits (65535 -> 255)."""
    if image.mode == "RGB":
        return image
    if image.mode.startswith("I;16") or image.mode == "I":
        # 16-bit grey (scientific and medical PNGs, TIFFs; Pillow opens them as I;16, older Pillows as I): its
        # convert() clips every value above 255, which turns such an image white.
        grey = np.clip(np.round(np.asarray(image, np.float64) / 257), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")


def read_bbox_xml(path: str) -> list[tuple[float, float, float, float]]:
    """Boxes of an ImageNet (PASCAL VOC style) annotation as (xmin, ymin, xmax, ymax) in [0, 1] of
    the annotated image size. Because they are normalized, they stay right after any resize."""
    root = ET.parse(path).getroot()
    width = float(root.findtext("size/width"))
    height = float(root.findtext("size/height"))
    if width <= 0 or height <= 0:
        raise ValueError(f"{path}: annotation size must be positive, received {width}x{height}")
    boxes = []
    for obj in root.iter("object"):
        box = obj.find("bndbox")
        x0, y0, x1, y1 = (float(box.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax"))
        x0, x1 = sorted((_clip(x0 / width), _clip(x1 / width)))
        y0, y1 = sorted((_clip(y0 / height), _clip(y1 / height)))
        boxes.append((x0, y0, x1, y1))
    return boxes


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))
