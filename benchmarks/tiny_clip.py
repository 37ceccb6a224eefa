"""Learning check of the built-in tiny CLIP (surge/rewards/tinyclip.py): collect highway-env
frames, train, and measure how the contrast of the goals separates crashed from other
held-out frames.

    .venv/bin/python benchmarks/tiny_clip.py                     # the defaults: 20k frames
    .venv/bin/python benchmarks/tiny_clip.py --frames 4000 --steps 300

Targets (printed): training <= 5 minutes on 2 cores; held-out AUROC of z (crashed against
the rest) >= 0.95. Writes benchmarks/results/tiny_clip.md and .json, and the model to
--model-dir (a CLIP directory for `reward_model.path`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402

from surge.rewards.tinyclip import TinyClipSettings, build  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    for f in fields(TinyClipSettings):
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default
        )
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    settings = TinyClipSettings(**{f.name: getattr(args, f.name) for f in fields(TinyClipSettings)})
    directory = args.model_dir or Path(tempfile.mkdtemp(prefix="surge-tiny-clip-"))
    record = build(directory, settings)
    ok_time, ok_auroc = record["train_s"] <= 300, record["heldout_auroc"] >= 0.95
    cmd = "python benchmarks/tiny_clip.py " + " ".join(sys.argv[1:])
    text = "\n".join(
        [
            "# The built-in tiny CLIP on highway-env frames",
            "",
            f"Command: `{cmd.strip()}`",
            "",
            f"Machine: {summary()}",
            "",
            "```",
            json.dumps(record, indent=1),
            "```",
            "",
            f"- {'met' if ok_time else 'NOT met'}: training {record['train_s']} s <= 300 s "
            f"(collecting the frames took {record['collect_s']} s)",
            f"- {'met' if ok_auroc else 'NOT met'}: held-out AUROC {record['heldout_auroc']:.3f} "
            ">= 0.95",
            "",
        ]
    )
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tiny_clip.md").write_text(text)
    (args.out / "tiny_clip.json").write_text(json.dumps(record, indent=1))
    return 0 if ok_time and ok_auroc else 1


if __name__ == "__main__":
    raise SystemExit(main())
