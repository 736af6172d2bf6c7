"""Capacity planning: which batch interval and concurrency keep scheduling delay bounded?

Simulates a three-operation pipeline (parse scales with the input, enrich and write vary at
random) on the real scheduler in virtual time, over a grid of batch intervals and
``concurrent_jobs``, with bursts of input every few minutes. Prints the stable region, picks the
shortest stable interval for each concurrency, and writes two plots into ``--out``:
``sweep.png`` (the grid) and ``best.png`` (delays over time of the recommended configuration).

    python examples/capacity_planning.py --out /tmp/plan
    python examples/capacity_planning.py --rate-factor 1.3        # what if input grows 30 %?
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from scheduler import Milliseconds, Minutes
from streaming.simulation import (
    BurstRate,
    Exponential,
    Linear,
    LogNormal,
    OutputModel,
    SimulationModel,
    format_duration,
    plot_run,
    plot_sweep,
    simulate,
    sweep,
)


def pipeline(rate_factor: float, seed: int) -> SimulationModel:
    """The pipeline under study: 400 records/s, with 30 s bursts at 1,200 records/s every 3 minutes."""
    return SimulationModel(
        batch_interval=Milliseconds(1000),
        outputs=[
            OutputModel("parse", Linear(base_ms=60, per_record_ms=0.5)),
            OutputModel("enrich", LogNormal(median_ms=200, sigma=0.5)),
            OutputModel("write", Exponential(mean_ms=120)),
        ],
        input=BurstRate(per_second=400, burst_per_second=1200, every_ms=180_000, length_ms=30_000, first_ms=60_000),
        rate_factor=rate_factor,
        seed=seed,
    )


def main(argv: list[str] | None = None) -> None:
    """Sweep, print the table and the recommendation, write the plots."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("capacity-planning"), help="folder for the plots")
    parser.add_argument("--intervals-ms", default="500,1000,2000,4000", help="batch intervals to try, in ms")
    parser.add_argument("--concurrency", default="1,2,3", help="concurrent_jobs values to try")
    parser.add_argument("--horizon-min", type=float, default=5, help="simulated minutes per configuration")
    parser.add_argument("--rate-factor", type=float, default=1.0, help="multiply the input rate")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    model = pipeline(args.rate_factor, args.seed)
    intervals = [Milliseconds(int(ms)) for ms in args.intervals_ms.split(",")]
    concurrency = [int(c) for c in args.concurrency.split(",")]
    started = time.perf_counter()
    result = sweep(model, intervals, concurrency, horizon=Minutes(args.horizon_min))
    print(result.format_table())
    print()
    best = None
    for c in concurrency:
        stable = [i for i in intervals if result.point(i, c).summary.stable]
        if stable:
            shortest = min(stable)
            s = result.point(shortest, c).summary
            print(f"concurrent_jobs={c}: shortest stable interval {format_duration(shortest.milliseconds)} "
                  f"(utilisation {s.utilisation:.2f}, p95 total delay {format_duration(s.total_delay.p95_ms)})")
            if best is None or shortest < best[0]:
                best = (shortest, c)
        else:
            print(f"concurrent_jobs={c}: no interval tried is stable")
    args.out.mkdir(parents=True, exist_ok=True)
    plot_sweep(result, args.out / "sweep.png", title=f"p95 total delay, input x{args.rate_factor:g}")
    written = [args.out / "sweep.png"]
    if best is not None:
        run = simulate(model.evolve(batch_interval=best[0], concurrent_jobs=best[1], duration=Minutes(args.horizon_min)))
        plot_run(run, args.out / "best.png")
        written.append(args.out / "best.png")
    print(f"\n{len(result.points)} configurations simulated in {time.perf_counter() - started:.1f} s; "
          f"plots: {', '.join(str(p) for p in written)}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, without a traceback
        raise SystemExit(130) from None
