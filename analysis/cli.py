"""fa-traffic: the HBM-traffic report (placeholder until the report lands)."""
import sys


def main(argv=None) -> int:
    print("fa-traffic: the report is not built yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
