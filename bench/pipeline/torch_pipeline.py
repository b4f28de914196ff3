#!/usr/bin/python3
"""The PyTorch side of `sluice bench pipeline`: the same ResNet-style input pipeline with
torch.utils.data.DataLoader, on the same JPEG files and CPU count, in one of two variants:

--variant usual (the recipe in torchvision's ImageNet example), per image: PIL open +
  convert('RGB') (torchvision's default loader), RandomResizedCrop(224), RandomHorizontalFlip(),
  ToTensor(), Normalize(ImageNet mean/std).
--variant best (skips the work PIL lets one skip; pil_crop.crop_resize_best): the crop box is drawn
  from the header's size (RandomResizedCrop.get_params), the JPEG is decoded with Image.draft() at
  the smallest DCT scale that keeps the crop at least 224x224 (the same rule as Sluice), only the
  box is resampled (resize(box=...), no full-size crop or convert copy), the flip is done on the
  224x224 result, and to-tensor + normalize is one uint8 -> float pass and one in-place normalize.

Both: DataLoader worker processes with one torch thread each; batches of --batch collated by the
workers. Runs for --seconds of steady state after --warmup-batches, cycling over the files as often
as needed. Batch i comes from worker i % N and the N workers finish their batches at about the same
time, so the window starts and ends at the last batch of such a group (warm-up and measured batch
counts are multiples of N): counting from inside a group would add a batch that cost no time.
Prints progress on stderr and, as its LAST stdout line, one JSON object:
  {"images": ..., "seconds": ..., "images_per_sec": ..., "cpu_seconds": ..., "workers": ..., "variant": ...}
cpu_seconds counts this process and its worker processes over the measured window.

Usage: /usr/bin/python3 torch_pipeline.py --images DIR --workers N [--variant usual|best]
       [--seconds S] [--batch B] [--cpus 0,1]
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
    parser.add_argument("--variant", choices=["usual", "best"], default="usual",
                        help="usual: torchvision's recipe; best: draft() decode, box-only resample")
    args = parser.parse_args(argv)

    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})

    try:
        import torch
        import torchvision.transforms as T
        import torchvision.transforms.functional as TF
        from PIL import Image
        import pil_crop  # next to this script
    except ImportError as e:
        sys.exit(f"torch_pipeline.py: {e}; install python3-torch, python3-torchvision and python3-pil "
                 "and run with /usr/bin/python3")

    files = sorted(glob.glob(os.path.join(args.images, "*.jpg")))
    if not files:
        sys.exit(f"torch_pipeline.py: no *.jpg files in {args.images}")

    torch.set_num_threads(1)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    transform = T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=mean, std=std),
    ])
    mean255 = [255 * m for m in mean]
    std255 = [255 * s for s in std]
    rrc = T.RandomResizedCrop(224)

    def best(f):
        img = Image.open(f)
        top, left, h, w = rrc.get_params(img, rrc.scale, rrc.ratio)  # reads only the header's size
        out, _ = pil_crop.crop_resize_best(img, (left, top, w, h), (224, 224))
        if torch.rand(1) < 0.5:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
        return TF.normalize(TF.pil_to_tensor(out).float(), mean255, std255, inplace=True)

    class JpegFiles(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            with open(files[i], "rb") as f:
                if args.variant == "best":
                    return best(f)
                img = Image.open(f)
                img = img.convert("RGB")
            return transform(img)

    def worker_init(_):
        torch.set_num_threads(1)

    loader = torch.utils.data.DataLoader(
        JpegFiles(), batch_size=args.batch, shuffle=False, num_workers=args.workers,
        worker_init_fn=worker_init, persistent_workers=args.workers > 0, drop_last=False)

    group = max(1, args.workers)
    warmup = -(-max(1, args.warmup_batches) // group) * group  # a multiple of the group
    batches = 0
    images = 0
    start = None
    cpu_start = 0.0
    last_report = time.monotonic()
    done = False
    while not done:
        for batch in loader:
            batches += 1
            if batches == warmup:
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
            if now - start >= args.seconds and (batches - warmup) % group == 0:
                done = True
                break
    elapsed = time.monotonic() - start
    cpu = cpu_seconds_total() - cpu_start
    print(json.dumps({"images": images, "seconds": elapsed, "images_per_sec": images / elapsed,
                      "cpu_seconds": cpu, "workers": args.workers, "batch": args.batch,
                      "variant": args.variant, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
