"""`python -m interp.studies.heuristic_core --reverdict DATA.json` (rewrite its verdicts in place) or
`--mechanism DATA.json [UNITS]` (add both mechanism claims)."""

import json
import sys
from pathlib import Path

from interp.files.storage import write_text_atomic
from interp.studies.heuristic_core import extend, reverdict

if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("--reverdict", "--mechanism"):
    raise SystemExit("usage: python -m interp.studies.heuristic_core --reverdict DATA.json  (rewrites its verdicts in place)\n"
                     "       python -m interp.studies.heuristic_core --mechanism DATA.json [UNITS]  (adds both mechanism claims)")
path, command = Path(sys.argv[2]), "python -m interp.studies.heuristic_core " + " ".join(sys.argv[1:])
data = json.loads(path.read_text())
out = reverdict(data, command) if sys.argv[1] == "--reverdict" else extend(data, sys.argv[3] if len(sys.argv) == 4 else None, command)
write_text_atomic(path, json.dumps(out, indent=2) + "\n")
