"""Tests for make_jpeg_dataset.py (run with /usr/bin/python3 -m pytest)."""

import glob
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_jpeg_dataset.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def photo(tmp_path):
    """A small stand-in 'photograph' so the test does not depend on installed wallpapers."""
    src = tmp_path / "src"
    src.mkdir()
    img = Image.radial_gradient("L").resize((900, 700)).convert("RGB")
    img.save(src / "one_by_test.jpg", quality=95)
    return str(src / "*.jpg")


def test_builds_imagenet_like_jpegs_and_is_idempotent(tmp_path, photo):
    out = tmp_path / "set"
    r = run(str(out), "--count", "5", "--workers", "1", "--photos", photo)
    assert r.returncode == 0, r.stderr
    assert "source photo:" in r.stdout and "one_by_test.jpg" in r.stdout
    files = sorted(glob.glob(str(out / "img_*.jpg")))
    assert len(files) == 5
    for f in files:
        with Image.open(f) as im:
            assert im.format == "JPEG"
            assert im.mode == "RGB"
            assert 400 <= max(im.size) <= 500
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["count"] == 5
    assert manifest["sources"][0]["path"].endswith("one_by_test.jpg")

    before = {f: os.path.getmtime(f) for f in files}
    again = run(str(out), "--count", "5", "--workers", "1", "--photos", photo)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout
    assert "one_by_test.jpg" in again.stdout  # still says which photos were used
    assert {f: os.path.getmtime(f) for f in files} == before

    # A different count rebuilds the set.
    more = run(str(out), "--count", "7", "--workers", "1", "--photos", photo)
    assert more.returncode == 0, more.stderr
    assert len(glob.glob(str(out / "img_*.jpg"))) == 7


def test_output_is_deterministic(tmp_path, photo):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run(str(a), "--count", "3", "--workers", "1", "--photos", photo).returncode == 0
    assert run(str(b), "--count", "3", "--workers", "2", "--photos", photo).returncode == 0
    for name in ("img_00000.jpg", "img_00001.jpg", "img_00002.jpg"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_falls_back_to_procedural_images_when_no_photo_exists(tmp_path):
    out = tmp_path / "set"
    r = run(str(out), "--count", "2", "--workers", "1", "--photos", str(tmp_path / "none" / "*.jpg"))
    assert r.returncode == 0, r.stderr
    assert "procedurally textured" in r.stdout
    assert "WARNING" in r.stderr
    assert len(glob.glob(str(out / "img_*.jpg"))) == 2


def test_rejects_a_bad_count(tmp_path):
    r = run(str(tmp_path / "x"), "--count", "0")
    assert r.returncode != 0
    assert "--count" in r.stderr
