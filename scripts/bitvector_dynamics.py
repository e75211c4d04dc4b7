"""When does a bit-vector VAE's code collapse, and what comes first?  The dynamics of
fairseq_sparse.latent.dynamics, from fairseq-train logs.

    python scripts/bitvector_dynamics.py "lr 2e-3=DIR/logs/bitvector_vae_d32/sparsemap_seed1.log" ... --out OUT
"""

import argparse
from pathlib import Path

from fairseq_sparse.latent import dynamics


def run_spec(text):
    label, sep, path = text.rpartition("=")
    path = Path(path)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{path}: no such log")
    return (label if sep else path.stem), path


def main(argv=None):
    parser = argparse.ArgumentParser(description=dynamics.__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=dynamics.__doc__)
    parser.add_argument("runs", nargs="+", type=run_spec, metavar="[LABEL=]LOG",
                        help="fairseq-train logs of bitvector_vae runs with a short --log-interval")
    parser.add_argument("--out", type=Path, required=True, help="folder for dynamics.md and dynamics.png")
    parser.add_argument("--updates", type=int, nargs="+", default=[20, 50, 200],
                        help="updates at which the table gives q's entropy and the scores' shared and spread parts "
                             "(default: 20 50 200)")
    parser.add_argument("--early", type=int, default=20,
                        help="the table's gradient alignment is averaged over updates 1 to EARLY (default: 20)")
    args = parser.parse_args(argv)
    if any(u < 1 for u in args.updates):
        parser.error(f"--updates {' '.join(map(str, args.updates))}: updates are counted from 1")
    if args.early < 1:
        parser.error(f"--early {args.early}: must be at least 1")
    dynamics.run(args)


if __name__ == "__main__":
    main()
