#!/usr/bin/python3
"""Crop-and-resize of a JPEG with PIL, the two ways `sluice bench pipeline`'s torch side does it.

- crop_resize_usual: torchvision's RandomResizedCrop on a PIL image as the usual recipe has it:
  decode the whole image at full size, convert('RGB'), crop the box, resize the crop (bilinear,
  antialiased). (torchvision.transforms.functional.resized_crop does exactly crop + resize.)
- crop_resize_best: as much of Sluice's fused region decode as PIL allows. Image.draft() makes
  libjpeg decode at 1/2, 1/4 or 1/8 scale (DCT scaling) when the crop stays at least as large as
  the output, with the same rule Sluice uses (dct_scale below); the box, scaled, is resampled
  directly by resize(box=...) with no full-size crop copy; convert('RGB') (a no-op for colour
  JPEGs) runs on the 224x224 result only. PIL cannot skip decoding rows or columns outside the box.

Boxes are (x, y, w, h) in full-size pixels; sizes (width, height).

Run as a script, it is the PIL half of bench_pipeline_test's check that Sluice's crop-and-resize
matches PIL's:  pil_crop.py MANIFEST.json  where the manifest is a JSON list of
  {"jpeg": path, "box": [x, y, w, h], "size": [w, h], "usual": out_path, "best": out_path}
and each output is written as raw RGB bytes (h rows of w * 3). Prints one JSON line with the DCT
scale PIL used per entry.
"""

import json
import sys

from PIL import Image


def dct_scale(crop_w, crop_h, out_w, out_h):
    """The largest of 8, 4, 2 that keeps the crop at least out_w x out_h after scaling; else 1.
    The same rule as Sluice's ChooseDctScale (dataplane/pipeline/image/decode_ops.cc)."""
    for d in (8, 4, 2):
        if crop_h >= d * out_h and crop_w >= d * out_w:
            return d
    return 1


def crop_resize_usual(img, box, size):
    """`img`: a PIL image as Image.open returned it (not loaded yet)."""
    x, y, w, h = box
    img = img.convert("RGB")
    return img.crop((x, y, x + w, y + h)).resize(size, Image.BILINEAR)


def draft_for(img, box, size):
    """Sets draft() on a not yet loaded JPEG for `box`; returns the scale it will decode at."""
    s = dct_scale(box[2], box[3], size[0], size[1])
    scale = 1
    if s > 1 and img.format == "JPEG":
        width, height = img.size
        # draft() picks the largest scale n with width // request_w >= n (and the same for the
        # height); asking for (width // s, height // s) makes that n exactly s.
        drafted = img.draft("RGB", (max(1, width // s), max(1, height // s)))
        if drafted is not None:
            scale = width / drafted[1][2]
    return scale


def crop_resize_best(img, box, size):
    """`img`: a PIL image as Image.open returned it (not loaded yet). Returns (image, DCT scale)."""
    x, y, w, h = box
    scale = draft_for(img, box, size)
    out = img.resize(size, Image.BILINEAR, box=(x / scale, y / scale, (x + w) / scale, (y + h) / scale))
    if out.mode != "RGB":
        out = out.convert("RGB")
    return out, scale


def main(argv):
    if len(argv) != 1:
        sys.exit("usage: pil_crop.py MANIFEST.json")
    with open(argv[0]) as f:
        entries = json.load(f)
    scales = []
    for e in entries:
        box, size = tuple(e["box"]), tuple(e["size"])
        with Image.open(e["jpeg"]) as img:
            usual = crop_resize_usual(img, box, size)
        with Image.open(e["jpeg"]) as img:
            best, scale = crop_resize_best(img, box, size)
        for img, path in ((usual, e["usual"]), (best, e["best"])):
            assert img.size == size and img.mode == "RGB", (img.size, img.mode)
            with open(path, "wb") as out:
                out.write(img.tobytes())
        scales.append(scale)
    print(json.dumps({"entries": len(entries), "pil_dct_scales": scales}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
