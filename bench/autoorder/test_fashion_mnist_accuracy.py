"""Smoke test of fashion_mnist_accuracy.py: one seed per mode on 512 images through a real dispatcher and
worker; checks the JSON line's fields and that relaxed AutoOrder was applied (not the accuracies)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_smoke_run_reports_both_modes():
    build = os.environ["SLUICE_BINARY_DIR"]
    out = subprocess.run([sys.executable, os.path.join(HERE, "fashion_mnist_accuracy.py"), "--smoke", "--build", build],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == "fashion_mnist_autoorder_accuracy"
    for mode in ("off", "relaxed"):
        acc = result["accuracy"][mode]
        assert len(acc["values"]) == 1
        for key in ("mean", "stdev", "min", "max", "autoorder"):
            assert key in acc
        assert 0.0 <= acc["mean"] <= 1.0
    assert result["accuracy"]["off"]["autoorder"] == "off"
    assert result["accuracy"]["relaxed"]["autoorder"].startswith("applied: reshape(image) -> random_resized_crop(image)")
    assert "per_seed_difference" in result
