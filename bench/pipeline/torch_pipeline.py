#!/usr/bin/python3
"""The PyTorch side of `sluice bench pipeline`: the same ResNet-style input pipeline with
torch.utils.data.DataLoader and torchvision transforms, on the same JPEG files and CPU count.

Per image (in DataLoader worker processes, one torch thread each): PIL open + convert('RGB')
(torchvision's default loader), RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
Normalize(ImageNet mean/std); batches of 128 collated by the workers.

Runs for --seconds of steady state after --warmup-batches, cycling over the files as often as
needed, and prints progress on stderr and, as its LAST stdout line, one JSON object:
  {"images": ..., "seconds": ..., "images_per_sec": ..., "cpu_seconds": ..., "workers": ...}
cpu_seconds counts this process and its (joined) worker processes over the measured window.

Usage: /usr/bin/python3 torch_pipeline.py --images DIR --workers N [--seconds S] [--batch B]
"""

import argparse
import glob
import json
import os
import resource
import sys
import time


def cpu_seconds_total():
    """CPU time of this process plus its live children (from /proc), plus reaped children."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pid = os.getpid()
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + ru.ru_utime + ru.ru_stime


def main(argv):
    parser = argparse.ArgumentParser(description="PyTorch DataLoader baseline for sluice bench pipeline")
    parser.add_argument("--images", required=True, help="directory of *.jpg files")
    parser.add_argument("--workers", type=int, required=True, help="DataLoader num_workers (= cores)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds (default 20)")
    parser.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    parser.add_argument("--warmup-batches", type=int, default=2, help="batches before timing starts")
    parser.add_argument("--cpus", default="", help="comma-separated CPU ids to pin to (default: no pinning)")
    args = parser.parse_args(argv)

    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})

    try:
        import torch
        import torchvision.transforms as T
        from PIL import Image
    except ImportError as e:
        sys.exit(f"torch_pipeline.py: {e}; install python3-torch, python3-torchvision and python3-pil "
                 "and run with /usr/bin/python3")

    files = sorted(glob.glob(os.path.join(args.images, "*.jpg")))
    if not files:
        sys.exit(f"torch_pipeline.py: no *.jpg files in {args.images}")

    torch.set_num_threads(1)
    transform = T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])

    class JpegFiles(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            with open(files[i], "rb") as f:
                img = Image.open(f)
                img = img.convert("RGB")
            return transform(img)

    def worker_init(_):
        torch.set_num_threads(1)

    loader = torch.utils.data.DataLoader(
        JpegFiles(), batch_size=args.batch, shuffle=False, num_workers=args.workers,
        worker_init_fn=worker_init, persistent_workers=args.workers > 0, drop_last=False)

    batches = 0
    images = 0
    start = None
    cpu_start = 0.0
    last_report = time.monotonic()
    done = False
    while not done:
        for batch in loader:
            batches += 1
            if batches == args.warmup_batches:
                start = time.monotonic()
                cpu_start = cpu_seconds_total()
                continue
            if start is None:
                continue
            images += batch.shape[0]
            now = time.monotonic()
            if now - last_report >= 5:
                print(f"torch: {images} images in {now - start:.1f} s ({images / (now - start):.1f} images/s)",
                      file=sys.stderr, flush=True)
                last_report = now
            if now - start >= args.seconds:
                done = True
                break
    elapsed = time.monotonic() - start
    cpu = cpu_seconds_total() - cpu_start
    print(json.dumps({"images": images, "seconds": elapsed, "images_per_sec": images / elapsed,
                      "cpu_seconds": cpu, "workers": args.workers, "batch": args.batch,
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
