#!/usr/bin/env python3
"""--spec gpt gives run --matrix's verdicts (issue 14).

For each single-model GPT scenario in scenarios/spec-gpt/: `distckpt run
--matrix --keep` saves under every topology and loads under every other;
then, for every checkpoint that saved, `distckpt verify --spec gpt` (the
model inferred from the checkpoint's metadata, heads from --set) under every
topology must exit 0 exactly where the run's pair passed, 1 where it failed.
The inferred model must also match the scenario's (vocab: the stored padded
rows). Usage: spec_gpt_matrix_test.py DISTCKPT SPEC_GPT_DIR
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile


def main():
    distckpt, spec_dir = sys.argv[1], sys.argv[2]
    scenarios = sorted(glob.glob(os.path.join(spec_dir, "*.json")))
    assert len(scenarios) >= 4, scenarios
    compared = refusals = 0
    for path in scenarios:
        scenario = json.load(open(path))
        model = scenario["model"]
        topologies = scenario["topologies"]
        with tempfile.TemporaryDirectory(prefix="distckpt-specgpt-") as work:
            report = os.path.join(work, "run.json")
            run = subprocess.run([distckpt, "run", path, "--matrix", "--keep", "--work-dir",
                                  os.path.join(work, "ck"), "--report", report],
                                 capture_output=True, text=True)
            assert run.returncode in (0, 1), run.stderr
            pairs = json.load(open(report))["pairs"]
            verdict = {(p["save"], p["load"]): p["verdict"] == "ok" for p in pairs}
            for i, saved in enumerate(topologies):
                dirs = [d for d in glob.glob(os.path.join(work, "ck", "save-%d-*" % i))
                        if os.path.isdir(d)]  # not the save's <dir>.lock
                if not dirs or not os.path.exists(os.path.join(dirs[0], "metadata.json")):
                    assert not any(verdict[(saved, b)] for b in topologies), saved
                    continue  # the save itself failed: no checkpoint to verify
                ck = dirs[0]
                for load in topologies:
                    v = subprocess.run([distckpt, "verify", ck, "--spec", "gpt", "--set",
                                        "heads=%d" % model["heads"], "-t", load,
                                        "--report", os.path.join(work, "v.json")],
                                       capture_output=True, text=True)
                    want = 0 if verdict[(saved, load)] else 1
                    if v.returncode != want:
                        sys.exit("%s: saved %s, load %s: run says %s, verify exits %d:\n%s%s" %
                                 (path, saved, load, "ok" if want == 0 else "FAIL",
                                  v.returncode, v.stdout, v.stderr))
                    compared += 1
                    refusals += want
                # The inferred model: every field the scenario gives, vocab padded.
                line = [l for l in v.stdout.splitlines() if l.startswith("spec gpt inferred: ")]
                assert len(line) == 1, v.stdout
                inferred = json.loads(line[0][len("spec gpt inferred: "):])
                if isinstance(inferred, list):
                    inferred = inferred[0]
                for field in ("layers", "hidden", "ffn", "heads", "experts", "glu", "tied"):
                    want_value = model.get(field, {"experts": 0, "glu": False,
                                                   "tied": False}.get(field))
                    assert inferred[field] == want_value, (path, field, inferred, model)
                assert inferred.get("dtype", "bf16") == model.get("dtype", "bf16"), inferred
                assert inferred["vocab"] >= model["vocab"], inferred
                if model.get("experts"):
                    freq = model["moe_layer_freq"]
                    got = inferred["moe_layer_freq"]
                    if isinstance(freq, int):
                        freq = [1 if g % freq == 0 else 0 for g in range(model["layers"])]
                    if isinstance(got, int):
                        got = [1 if g % got == 0 else 0 for g in range(model["layers"])]
                    assert got == freq, (path, got, freq)
                json.load(open(os.path.join(work, "v.json")))  # the JSON report parses
            # Inference itself, checked once per scenario through the error text
            # of a spec without heads (it must name the field).
            v = subprocess.run([distckpt, "verify", ck, "--spec", "gpt", "-t", topologies[0]],
                               capture_output=True, text=True)
            assert v.returncode == 2 and "cannot infer 'heads'" in v.stderr, v.stderr
    assert refusals > 0 and refusals < compared, (refusals, compared)
    print("spec gpt: %d (checkpoint, topology) verdicts equal run --matrix's, %d of them refusals"
          % (compared, refusals))


if __name__ == "__main__":
    main()
