"""An HTTP server for the tests of remote shards: it serves the files of a directory with ETags and
Range requests, as object stores and CDNs do, or passes requests on to another server (--upstream:
a proxy in front of an S3-compatible store), and misbehaves on request, as they sometimes do.

    fault_server.py ROOT PORT_FILE [--faults JSON] [--log FILE] [--upstream http://HOST:PORT]

It listens on 127.0.0.1 (a free port, written to PORT_FILE once it listens). --faults maps a file
name to the faults its next requests meet, one per request, in order:

    "reset:N"      the answer's headers and N bytes of its body, then the connection reset
    "stall:N:S"    the same, with a pause of S seconds before the reset
    "ok"           none: the request is answered as it should be
    "status:C"     an empty answer with status C (500, 404, ...)
    "slowdown"     503 with S3's <Code>SlowDown</Code> body
    "newversion"   the object as if it had changed: another ETag
    "always:C"     status C for this and every later request

A fault is keyed by the request path's last component (an object's file name). --log appends one
line per request: "METHOD NAME RANGE" (RANGE "-" when none)."""

import argparse
import email.utils
import hashlib
import http.client
import http.server
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("port_file")
    p.add_argument("--faults", default="{}")
    p.add_argument("--log")
    p.add_argument("--upstream")
    args = p.parse_args()
    faults = {name: list(plan) for name, plan in json.loads(args.faults).items()}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def next_fault(self, name):
            with lock:
                plan = faults.get(name, [])
                if not plan:
                    return None
                if plan[0].startswith("always:"):
                    return plan[0]
                return plan.pop(0)

        def answer(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's name)
            name = self.path.split("?")[0].rsplit("/", 1)[-1]
            want = self.headers.get("Range", "-")
            if args.log:
                with lock, open(args.log, "a") as log:
                    log.write(f"GET {name} {want}\n")
            fault = self.next_fault(name)
            if fault and (fault.startswith("status:") or fault.startswith("always:")):
                return self.answer(int(fault.split(":")[1]))
            if fault == "slowdown":
                body = b"<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>"
                return self.answer(503, body, [("Content-Type", "application/xml")])
            if args.upstream:
                return self.relay(fault)
            path = os.path.join(args.root, name)
            if not name or not os.path.isfile(path):
                return self.answer(404)
            with open(path, "rb") as f:
                data = f.read()
            etag = '"' + hashlib.md5(data).hexdigest() + ('-new"' if fault == "newversion" else '"')
            first, last, status = 0, len(data) - 1, 200
            if want.startswith("bytes="):
                a, _, b = want[6:].partition("-")
                first = int(a)
                last = min(int(b), len(data) - 1) if b else len(data) - 1
                if first >= len(data):
                    return self.answer(416, headers=[("Content-Range", f"bytes */{len(data)}"), ("ETag", etag)])
                status = 206
            body = data[first : last + 1]
            self.send_response(status)
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", email.utils.formatdate(usegmt=True))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.send_body(body, fault)

        def send_body(self, body, fault):
            if fault and fault.startswith(("reset:", "stall:")):
                self.wfile.write(body[: int(fault.split(":")[1])])
                self.wfile.flush()
                pause = float(fault.split(":")[2]) if fault.startswith("stall:") else 0
                time.sleep(0.2 + pause)  # the bytes are read before the reset, which would discard them
                # SO_LINGER 0: close() sends a reset, as a dropped connection does.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            self.wfile.write(body)

        def relay(self, fault):
            """The upstream's answer to this request, headers and all (the Host header too, so that
            a signature stays valid), with the fault applied to its body."""
            up = urllib.parse.urlsplit(args.upstream)
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
            conn.request("GET", self.path, headers={k: v for k, v in self.headers.items()})
            answer = conn.getresponse()
            body = answer.read()
            self.send_response(answer.status)
            for k, v in answer.getheaders():
                if k.lower() == "etag" and fault == "newversion":
                    v = v[:-1] + '-new"'
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            conn.close()
            self.send_body(body, fault)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
