#!/usr/bin/python3
"""Builds an ImageNet-like JPEG set for the pipeline benchmark.

Every image is a random crop (random position, scale and aspect ratio, sometimes mirrored) of a
natural photograph shipped in a Debian package, resized so its longer side is 400-500 pixels and
saved as a baseline JPEG (quality 90, 4:2:0), like the typical ImageNet training image.

Photographs come from (first found wins, all found are used):
  - lomiri-wallpapers-16.04: 14 photos under /usr/share/backgrounds/*_by_*.jpg
  - lomiri-wallpapers-20.04: one photo (Kleiber_by_Lukas_Baubkus.jpg)
  - mate-backgrounds:        nature photos under /usr/share/backgrounds/mate/nature/
  - python3-skimage:         astronaut, coffee, chelsea, motorcycle, rocket test photos
Only if none is installed does it fall back to procedurally textured images (and says so).

Idempotent: when DIR already holds a complete set made with the same parameters (recorded in
DIR/MANIFEST.json) it only prints the sources and exits. Deterministic for a given source list.

Usage: /usr/bin/python3 make_jpeg_dataset.py DIR [--count N] [--seed S] [--workers W]
                                              [--photos GLOB] [--max-sources K]
"""

import argparse
import glob
import json
import multiprocessing
import os
import random
import sys

try:
    from PIL import Image, ImageFilter
except ImportError:  # pragma: no cover - environment problem, reported clearly
    sys.exit("make_jpeg_dataset.py: needs Pillow; install the Debian package python3-pil "
             "and run with /usr/bin/python3")

FORMAT_VERSION = 1
QUALITY = 90
LONG_SIDE = (400, 500)
# Photos in these globs are natural photographs (checked by eye); other wallpapers in the same
# packages are illustrations and are not used.
PHOTO_GLOBS = [
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/*_by_*.jpg"),
    ("lomiri-wallpapers-20.04", "/usr/share/backgrounds/Kleiber_by_Lukas_Baubkus.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/*.jpg"),
    ("python3-skimage", "/usr/lib/python3/dist-packages/skimage/data/astronaut.png"),
    ("python3-skimage", "/usr/lib/python3/dist-packages/skimage/data/coffee.png"),
    ("python3-skimage", "/usr/lib/python3/dist-packages/skimage/data/chelsea.png"),
    ("python3-skimage", "/usr/lib/python3/dist-packages/skimage/data/motorcycle_left.png"),
    ("python3-skimage", "/usr/lib/python3/dist-packages/skimage/data/rocket.jpg"),
]
# Illustrations that match the globs above.
NOT_PHOTOS = {"Fossa_by_Jasper_Roks.jpg", "free_by_Peter_Nerlich.jpg", "Painting-Colors_by__herobrine7gamer.jpg",
              "Infinite-Sea_by_Aury88.jpg"}
# Sources are decoded once at about this shorter side (JPEG draft mode makes that cheap).
SOURCE_SHORT_SIDE = 2400


def find_photos(globs=None):
    found = []
    seen = set()
    for package, pattern in (globs if globs is not None else PHOTO_GLOBS):
        for path in sorted(glob.glob(pattern)):
            if os.path.basename(path) in NOT_PHOTOS or path in seen:
                continue
            seen.add(path)
            found.append({"package": package, "path": path})
    return found


def load_source(path):
    img = Image.open(path)
    if img.format == "JPEG":
        short = min(img.size)
        scale = max(1, short // SOURCE_SHORT_SIDE)
        # draft() picks a DCT scale of at least the requested size.
        img.draft("RGB", (img.size[0] // scale, img.size[1] // scale))
    img = img.convert("RGB")
    short = min(img.size)
    if short > SOURCE_SHORT_SIDE * 1.5:
        f = SOURCE_SHORT_SIDE / short
        img = img.resize((round(img.size[0] * f), round(img.size[1] * f)), Image.BILINEAR,
                         reducing_gap=2.0)
    return img


def procedural_source(seed):
    """A textured, photo-like stand-in: smooth colour fields, edges and grain."""
    rnd = random.Random(seed)
    w, h = 1600, 1200
    small = Image.new("RGB", (16, 12))
    small.putdata([tuple(rnd.randrange(256) for _ in range(3)) for _ in range(16 * 12)])
    img = small.resize((w, h), Image.BICUBIC)
    noise = Image.effect_noise((w, h), 40).convert("RGB")
    img = Image.blend(img, noise, 0.25).filter(ImageFilter.GaussianBlur(1.2))
    return img


def output_size(rnd):
    long_side = rnd.randint(*LONG_SIDE)
    aspect = rnd.choice([4 / 3, 3 / 2, 1.0, 5 / 4, 16 / 9, 3 / 4, 2 / 3])
    if aspect >= 1:
        return long_side, max(1, round(long_side / aspect))
    return max(1, round(long_side * aspect)), long_side


def make_one(source, rnd):
    out_w, out_h = output_size(rnd)
    sw, sh = source.size
    aspect = out_w / out_h
    # Crop side: 45%-100% of what fits, at the output's aspect ratio.
    max_w = min(sw, sh * aspect)
    frac = rnd.uniform(0.45, 1.0)
    cw = max(out_w // 2, int(max_w * frac))
    ch = max(1, int(cw / aspect))
    cw, ch = min(cw, sw), min(ch, sh)
    x = rnd.randint(0, sw - cw)
    y = rnd.randint(0, sh - ch)
    img = source.crop((x, y, x + cw, y + ch)).resize((out_w, out_h), Image.BILINEAR, reducing_gap=2.0)
    if rnd.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img


_SOURCES = []


def _init_worker(source_paths, procedural_seeds):
    global _SOURCES
    _SOURCES = [load_source(p) for p in source_paths] + [procedural_source(s) for s in procedural_seeds]


def _make_range(args):
    out_dir, seed, start, stop = args
    for i in range(start, stop):
        rnd = random.Random(seed * 1_000_003 + i)
        source = _SOURCES[i % len(_SOURCES)]
        img = make_one(source, rnd)
        tmp = os.path.join(out_dir, f".img_{i:05d}.jpg.tmp")
        img.save(tmp, "JPEG", quality=QUALITY, subsampling="4:2:0")
        os.replace(tmp, os.path.join(out_dir, f"img_{i:05d}.jpg"))
    return stop - start


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="output directory (created if missing)")
    parser.add_argument("--count", type=int, default=2048, help="number of JPEGs (default 2048)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes to use")
    parser.add_argument("--photos", default=None,
                        help="use only photographs matching this glob instead of the known Debian packages")
    parser.add_argument("--max-sources", type=int, default=0, help="use at most this many photos (0: all)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")

    out_dir = os.path.abspath(args.dir)
    manifest_path = os.path.join(out_dir, "MANIFEST.json")
    photos = find_photos(None if args.photos is None else [("(--photos)", args.photos)])
    if args.max_sources > 0:
        photos = photos[:args.max_sources]
    wanted = {"format_version": FORMAT_VERSION, "count": args.count, "seed": args.seed,
              "quality": QUALITY, "long_side": list(LONG_SIDE),
              "sources": photos if photos else "procedural"}

    if os.path.exists(manifest_path):
        try:
            with open(manifest_path) as f:
                have = json.load(f)
        except (OSError, ValueError):
            have = None
        files = glob.glob(os.path.join(out_dir, "img_*.jpg"))
        if have == wanted and len(files) == args.count:
            print(f"make_jpeg_dataset: {out_dir} already holds {args.count} JPEGs; nothing to do")
            print_sources(have["sources"])
            return 0

    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    for stale in glob.glob(os.path.join(out_dir, "img_*.jpg")):
        os.remove(stale)

    if photos:
        print(f"make_jpeg_dataset: cropping {args.count} JPEGs from {len(photos)} photographs into {out_dir}")
        source_paths, procedural_seeds = [p["path"] for p in photos], []
    else:
        print("make_jpeg_dataset: WARNING: no photographs found (install lomiri-wallpapers-16.04); "
              "falling back to procedurally textured images, which compress unlike photos", file=sys.stderr)
        source_paths, procedural_seeds = [], list(range(8))
    print_sources(wanted["sources"])
    sys.stdout.flush()

    workers = max(1, min(args.workers, 8))
    chunk = 64
    jobs = [(out_dir, args.seed, s, min(s + chunk, args.count)) for s in range(0, args.count, chunk)]
    done = 0
    if workers == 1:
        _init_worker(source_paths, procedural_seeds)
        for job in jobs:
            done += _make_range(job)
    else:
        with multiprocessing.Pool(workers, _init_worker, (source_paths, procedural_seeds)) as pool:
            for n in pool.imap_unordered(_make_range, jobs):
                done += n
                if done % 512 < chunk:
                    print(f"make_jpeg_dataset: {done}/{args.count}")
                    sys.stdout.flush()
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out_dir, "img_*.jpg")))
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(wanted, f, indent=1)
    os.replace(manifest_path + ".tmp", manifest_path)
    print(f"make_jpeg_dataset: wrote {args.count} JPEGs, {total / 1e6:.1f} MB "
          f"({total / args.count / 1e3:.1f} kB each) to {out_dir}")
    return 0


def print_sources(sources):
    if sources == "procedural":
        print("make_jpeg_dataset: sources: procedurally textured images (no photographs installed)")
        return
    for s in sources:
        print(f"make_jpeg_dataset: source photo: {s['path']} (Debian package {s['package']})")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
