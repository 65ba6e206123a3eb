"""Read the forecasts kpi-forecast publishes to the RIC's Shared Data Layer, as an O-RAN SC
xApp reads the SDL: with ricsdl, the Redis named by DBAAS_SERVICE_HOST and DBAAS_SERVICE_PORT
(set in every xApp's pod on a RIC). Prints each forecast found as one line of JSON; exits 1
when there is none.

    python read_sdl.py --model traffic_mb cell-0017 cell-0018   # those cells
    python read_sdl.py --model traffic_mb                        # every cell published
"""

from __future__ import annotations

import argparse
import json
import sys

from ricsdl.syncstorage import SyncStorage


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="kpi-forecast-forecasts",
                        help="controls.publication.sdl.namespace of the xApp")
    parser.add_argument("--model", required=True, help="the model's name")
    parser.add_argument("cells", nargs="*", help="cell ids (none: every cell published)")
    args = parser.parse_args()
    sdl = SyncStorage()
    try:
        if args.cells:  # keys are <model>,<cell>
            found = sdl.get(args.namespace, {f"{args.model},{cell}" for cell in args.cells})
        else:
            found = sdl.find_and_get(args.namespace, f"{args.model},*")
    finally:
        sdl.close()
    for key in sorted(found):
        print(json.dumps(json.loads(found[key])))
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
