"""Plots bench/scale's JSON (run_scale.sh): seconds per phase, the load plan's
wall and CPU milliseconds, and metadata size against simulated ranks,
log-log, one line per configuration, with the targets.

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
    for i, (model, optimizer) in enumerate(configs):
        color = f"C{i}"  # one color per configuration in every panel
        ps = sorted((p for p in points if (p["model"], p["optimizer"]) == (model, optimizer)),
                    key=lambda p: p["world"])
        w = [p["world"] for p in ps]
        label = f"{model}, {optimizer}"
        axes[0].plot(w, [p["validate_s"] for p in ps], "o-", color=color,
                     label=label + ": validate")
        axes[0].plot(w, [p["commit_s"] for p in ps], "s--", color=color,
                     label=label + ": commit")
        # The slower of the planned ranks (0 and the last); refused plans
        # (dp_reshardable under another TP/PP) are not drawn.
        planned = [(p["world"], [r for r in p["plans"] if "refused" not in r]) for p in ps]
        planned = [(world, rs) for world, rs in planned if rs]
        if planned:
            pw = [world for world, _ in planned]
            axes[1].plot(pw, [max(r["plan_s"] for r in rs) * 1e3 for _, rs in planned],
                         "o-", color=color, label=label + ": wall")
            if all("plan_cpu_s" in r for _, rs in planned for r in rs):
                axes[1].plot(pw, [max(r["plan_cpu_s"] for r in rs) * 1e3 for _, rs in planned],
                             "x:", color=color, label=label + ": CPU")
        axes[2].plot(w, [p["metadata_bytes"] / 1e6 for p in ps], "o-", color=color, label=label)
    axes[0].axhline(10, color="red", lw=0.8, ls="--", label="target: validate + commit < 10 s")
    axes[1].axhline(100, color="red", lw=0.8, ls="--", label="target: < 100 ms")
    axes[0].set_title("save: global validation and commit (s)")
    axes[1].set_title("resharded load plan, slower of ranks 0 and last (ms)")
    axes[2].set_title("metadata.json (MB)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks([1024, 2048, 4096, 8192, 16384], ["1k", "2k", "4k", "8k", "16k"])
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
