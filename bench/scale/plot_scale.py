"""Plots bench/scale's JSON (run_scale.sh): seconds per phase and metadata
size against simulated ranks, log-log, one line per configuration.

    plot_scale.py scale.json scale.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    points = json.load(open(sys.argv[1]))
    configs = sorted({(p["model"], p["optimizer"]) for p in points})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for model, optimizer in configs:
        ps = sorted((p for p in points if (p["model"], p["optimizer"]) == (model, optimizer)),
                    key=lambda p: p["world"])
        w = [p["world"] for p in ps]
        label = f"{model}, {optimizer}"
        axes[0].plot(w, [p["validate_s"] for p in ps], "o-", label=label + ": validate")
        axes[0].plot(w, [p["commit_s"] for p in ps], "s--", label=label + ": commit")
        axes[1].plot(w, [p["plans"][0]["plan_s"] * 1e3 for p in ps], "o-", label=label)
        axes[2].plot(w, [p["metadata_bytes"] / 1e6 for p in ps], "o-", label=label)
    axes[0].set_title("save: global validation and commit (s)")
    axes[1].set_title("resharded load plan of one rank (ms)")
    axes[2].set_title("metadata.json without block checksums (MB)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("simulated ranks")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=6)
    axes[1].legend(fontsize=6)
    axes[2].legend(fontsize=6)
    fig.suptitle("distckpt at scale by simulation: Llama-3-405B shape, tp=8 pp=16, dp = ranks/128")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
