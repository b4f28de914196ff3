#!/usr/bin/python3
"""A real trainer for `sluice up --trainer`: a small PyTorch CNN learning Fashion-MNIST from a Sluice
data service through the Python client, then evaluating on the test set.

    /usr/bin/python3 examples/trainers/fashion_mnist_cnn.py --dispatcher 127.0.0.1:5000 \\
        [--pipeline examples/pipelines/fashion_mnist_augmented.yaml] [--train-seconds 60] [--eval-seconds 20]

Two phases, which is what the autoscaler sees:
- train: reads batches from the data service, each training step marked with `ds.step()` (the
  client reports wait and step time to the dispatcher: the stall signal the autoscaler sizes from);
- eval: reads nothing from the service (the test set comes from the local files with NumPy): the
  trainers' demand falls to zero and the autoscaler removes the workers no longer needed.

Progress goes to --progress FILE as JSON lines (one about every half second: phase, elements read,
wait and step seconds of the client, loss), and the last line of stdout is one JSON object with the
totals and the test accuracy. Needs Debian's python3-torch and dataset-fashion-mnist, and the build's
Python module on PYTHONPATH (build/python; `sluice up` sets it).
"""

import argparse
import gzip
import json
import os
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PIPELINE = os.path.join(HERE, "..", "pipelines", "fashion_mnist_augmented.yaml")


def read_idx(path):
    import numpy as np

    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic)")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def make_model(torch, side):
    """Small on purpose (it stands in for an accelerator's fast step): a strided first layer brings
    any side that is a multiple of 28 down to 28, then two 3x3 convolutions and a linear layer."""
    nn = torch.nn
    stride = max(1, side // 28)
    return nn.Sequential(
        nn.Conv2d(1, 8, stride, stride=stride), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10))


def main(argv):
    p = argparse.ArgumentParser(description="a small CNN on Fashion-MNIST through a Sluice data service")
    p.add_argument("--dispatcher", required=True, help="the dispatcher's host:port")
    p.add_argument("--pipeline", default=DEFAULT_PIPELINE, help="pipeline spec (YAML) the workers run")
    p.add_argument("--job-name", default="trainer", help="the data-service job to read")
    p.add_argument("--train-seconds", type=float, default=60.0, help="how long the train phase reads")
    p.add_argument("--eval-seconds", type=float, default=20.0, help="how long the eval phase lasts at most")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--progress", default="", help="file for JSON progress lines")
    p.add_argument("--lr", type=float, default=0.002, help="Adam's learning rate")
    args = p.parse_args(argv)
    if args.train_seconds <= 0 or args.eval_seconds < 0:
        p.error("--train-seconds must be > 0 and --eval-seconds >= 0")

    import numpy as np
    import torch
    import sluice

    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(0)
    spec = sluice.parse_pipeline(args.pipeline)
    progress = open(args.progress, "a", buffering=1) if args.progress else None

    def report(**fields):
        if progress:
            progress.write(json.dumps(dict(fields, t=round(time.monotonic() - t0, 3))) + "\n")

    t0 = time.monotonic()
    ds = sluice.Dataset(args.dispatcher, spec, job_name=args.job_name, sharding="dynamic", num_epochs=-1,
                        heartbeat_interval_s=0.2, max_buffered_bytes=16 << 20)
    model = None
    side = 28
    optimizer = None
    loss_fn = torch.nn.CrossEntropyLoss()
    elements = 0
    images_seen = 0
    last_loss = float("nan")
    last_report = 0.0
    it = iter(ds)
    try:
        report(phase="train", elements=0, wait_s=0.0, step_s=0.0)
        for batch in it:
            images = torch.from_numpy(np.ascontiguousarray(batch["image"], dtype=np.float32))
            if images.dim() == 3:  # [N, H, W]: one channel
                images = images.unsqueeze(1)
            elif images.dim() == 4 and images.shape[-1] == 1:  # NHWC with one channel
                images = images.permute(0, 3, 1, 2)
            labels = torch.from_numpy(np.asarray(batch["label"]).astype(np.int64).reshape(-1))
            if labels.numel() != images.shape[0]:  # one-hot labels
                labels = torch.from_numpy(np.asarray(batch["label"]).reshape(images.shape[0], -1).argmax(1))
            with it.step():
                if model is None:
                    side = images.shape[-1]
                    model = make_model(torch, side)
                    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
                optimizer.zero_grad()
                loss = loss_fn(model(images), labels)
                loss.backward()
                optimizer.step()
            last_loss = float(loss)
            elements += 1  # the data service's elements are batches
            images_seen += images.shape[0]
            now = time.monotonic() - t0
            if now - last_report >= 0.5:
                s = it.stats()
                report(phase="train", elements=elements, wait_s=s["wait_seconds"],
                       step_s=s["step_seconds"], loss=round(last_loss, 4))
                last_report = now
            if now >= args.train_seconds:
                break
        stats = it.stats()
    finally:
        it.close()
    train_seconds = time.monotonic() - t0
    report(phase="eval", elements=elements, wait_s=stats["wait_seconds"], step_s=stats["step_seconds"],
           loss=round(last_loss, 4))

    # Eval: the test set from local files, nothing read from the service.
    correct = total = 0
    eval_start = time.monotonic()
    if model is not None:
        images = read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz"))
        model.eval()
        with torch.no_grad():
            i = 0
            while total == 0 or time.monotonic() - eval_start < args.eval_seconds:
                x = torch.from_numpy(images[i:i + 500].astype(np.float32) / 255.0)
                x = ((x - 0.2860) / 0.3530).unsqueeze(1)
                if side != 28:
                    x = torch.nn.functional.interpolate(x, size=(side, side), mode="bilinear", align_corners=False)
                pred = model(x).argmax(1).numpy()
                correct += int((pred == labels[i:i + 500]).sum())
                total += len(pred)
                i = (i + 500) % len(images)
                if time.monotonic() - t0 - last_report >= 0.5:
                    report(phase="eval", elements=elements, wait_s=stats["wait_seconds"],
                           step_s=stats["step_seconds"], loss=round(last_loss, 4))
                    last_report = time.monotonic() - t0
                if args.eval_seconds == 0 or total >= 20 * len(images):
                    break
    out = {"trainer": "fashion_mnist_cnn", "elements": elements, "images": images_seen,
           "train_seconds": round(train_seconds, 3), "eval_seconds": round(time.monotonic() - eval_start, 3),
           "wait_seconds": stats["wait_seconds"], "step_seconds": stats["step_seconds"],
           "stall": stats["wait_seconds"] / stats["step_seconds"] if stats["step_seconds"] else 0.0,
           "final_loss": last_loss, "test_accuracy": correct / total if total else None}
    report(phase="done", elements=elements, wait_s=stats["wait_seconds"], step_s=stats["step_seconds"],
           loss=round(last_loss, 4))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
