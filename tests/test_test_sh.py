"""scripts/test.sh's second pass (oneDNN limited to AVX2) runs exactly the test files that run
the policy: the trainer in-process or as a command, the encoder, the PPO / LAMB pieces (issue 35
item 4: the runtime's tests reach no oneDNN kernel, so running them twice only costs time)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS_THE_POLICY = re.compile(r'bps_train\.(models|ppo|lamb)|SEResNet9|"bps_train\.(entry|train)"'
                             r'|from bps_train\.train import [^#\n]*\brun\b|from bps_train\.train import main$', re.M)


def avx2_files() -> list[str]:
    text = (ROOT / "scripts" / "test.sh").read_text()
    m = re.search(r'AVX2_FILES="([^"]*)"', text)
    assert m and "ONEDNN_MAX_CPU_ISA=AVX2" in text and "$AVX2_FILES" in text
    return sorted(m.group(1).split())


def test_avx2_pass_is_the_files_that_run_the_policy():
    listed = avx2_files()
    want = sorted(f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")
                  if p.name != Path(__file__).name and RUNS_THE_POLICY.search(p.read_text()))
    assert listed == want
    assert not [f for f in listed if Path(f).name.startswith("test_runtime_")]
