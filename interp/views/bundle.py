"""The circuitsvis browser bundle, shared by `interp.plot`'s widgets and `interp.views.circuit`
(neither imports the other for it): its text, a compact loader, and whether this kernel has been
sent it yet (a notebook needs the 1.3 MB bundle once, with the first view it displays)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["SENT", "first_view", "loader", "text", "waiting"]

# Whether this kernel's page already has the bundle; a dict so every holder sees one flag.
SENT = {"sent": False}


def first_view(needed: bool = True) -> bool:
    """True for the first view that needs the bundle in this kernel (it carries the bundle), and
    marks the bundle sent; False after."""
    first = not SENT["sent"]
    if first and needed:
        SENT["sent"] = True
    return first


def text() -> str:
    """circuitsvis's self-contained browser bundle (defines the global `CircuitsVis`)."""
    import circuitsvis

    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    return path.read_text(encoding="utf-8").replace("</script>", "<\\/script>")


def loader() -> str:
    """JS that defines the global `CircuitsVis` from the bundle stored gzipped and base64-encoded
    (about a third of its 1.3 MB: this is what a notebook stores), unpacked by the browser's
    DecompressionStream and run as a classic script (so its top-level names are globals)."""
    import base64
    import gzip

    packed = base64.b64encode(gzip.compress(text().encode("utf-8"), 9, mtime=0)).decode("ascii")
    return ("(function () { if (window.CircuitsVis) return; "
            f"var bytes = Uint8Array.from(atob('{packed}'), function (c) {{ return c.charCodeAt(0); }}); "
            "new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text()"
            ".then(function (code) { var s = document.createElement('script'); s.text = code; document.head.appendChild(s); }); })();")


def waiting(div: str, call: str) -> str:
    """JS that runs `call` once `CircuitsVis` is defined (the bundle may still be loading, or come
    from another output); after 10 s without it, a line in the view's place says what to run."""
    return (f"(function draw(n) {{ if (window.CircuitsVis) {{ {call} }} else if (n > 0) "
            f"{{ setTimeout(function () {{ draw(n - 1); }}, 200); }} else {{ document.getElementById("
            f"{json.dumps(div)}).textContent = 'circuitsvis is not loaded: run interp.plot.circuitsvis_init()'; }} }})(50);")
