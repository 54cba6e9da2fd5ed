"""The ledger's page in a real browser: `llm-context serve` (LLM_CONTEXT_BIN) in front of a
fake Anthropic on 127.0.0.1 that bills like the provider's cache (what the previous
request sent is read, the rest written), a 12-request session with large tool results
under an offloading policy, then `/ui` and the session's page loaded in headless Chromium
(CHROMIUM, else `chromium` on PATH). The DOM is checked against the JSON the same ledger
answers (the tenant and session rows, one chart point per request, the money figures),
the page must log nothing to the console, and screenshots at 1280×800 and 390×844 are
written under target/ui/ for a person to look at.

Standard library only: python3 -m unittest tests/agents/test_ledger_page.py
"""

import html.parser
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from recording import Serve, large_tool_result  # noqa: E402

SESSION = "page test/1"
MODEL = "claude-sonnet-4-6"
REQUESTS = 12
OUT = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "ui")


class Billing:
    """A fake Anthropic that bills each request by its bytes as the cache would: the bytes
    the previous request sent before its last message are read, the rest written."""

    def __init__(self):
        self.previous = b""
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                shared = 0
                for a, b in zip(outer.previous, body):
                    if a != b:
                        break
                    shared += 1
                outer.previous = body
                prompt = len(body) // 4
                read = shared // 4 * 9 // 10
                usage = {"input_tokens": 30, "output_tokens": 150,
                         "cache_read_input_tokens": read,
                         "cache_creation_input_tokens": max(prompt - read - 30, 0)}
                message = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
                           "content": [{"type": "text", "text": "Weiter."}],
                           "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}
                out = json.dumps(message).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Dom(html.parser.HTMLParser):
    """The elements of a page, each as (tag, attributes, text)."""

    def __init__(self, text):
        super().__init__()
        self.elements, self._open = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        element = [tag, dict(attrs), ""]
        self.elements.append(element)
        if tag not in ("meta", "link", "circle", "line", "polyline", "br", "img"):
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for element in self._open:
            element[2] += data

    def find(self, tag, **attrs):
        """The `tag` elements with each of `attrs` (`class_` a class among theirs)."""
        def has(e, k, v):
            name = k.rstrip("_").replace("_", "-")
            return v in e[1].get(name, "").split() if name == "class" else e[1].get(name) == v
        return [e for e in self.elements if e[0] == tag and all(has(e, k, v) for k, v in attrs.items())]


def chromium():
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class LedgerPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.browser = chromium()
        if not cls.browser:
            raise unittest.SkipTest("no chromium (scripts/test.sh installs it)")
        cls.upstream = Billing()
        cls.serve = Serve(cls.upstream, policy={"tool_result_max_chars": 2000})
        messages = [{"role": "user", "content": "Finde die Ursache der Störung in Zürich."}]
        for i in range(REQUESTS):
            call = f"toolu_{i:03d}"
            messages += [
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": call, "name": "lookup_outage",
                     "input": {"ort": "Zürich", "hinweis": f"Runde {i}"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": call,
                     "content": large_tool_result("Zürich", f"Runde {i}")}]},
            ]
            marked = json.loads(json.dumps(messages))
            marked[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
            body = {"model": MODEL, "max_tokens": 512, "messages": marked,
                    "system": [{"type": "text", "text": "Du bist ein Betriebsassistent. " * 400,
                                "cache_control": {"type": "ephemeral"}}],
                    "tools": [{"name": "lookup_outage", "description": "Looks up an outage.",
                               "input_schema": {"type": "object"}}]}
            request = urllib.request.Request(
                f"{cls.serve.url}/v1/messages", data=json.dumps(body).encode(),
                headers={"content-type": "application/json", "anthropic-version": "2023-06-01",
                         "x-api-key": "sk-ant-client", "x-llm-context-session": SESSION})
            with urllib.request.urlopen(request, timeout=60) as answer:
                assert answer.status == 200
        os.makedirs(OUT, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.serve.close()
        cls.upstream.close()

    def get_json(self, path):
        with urllib.request.urlopen(f"{self.serve.url}{path}", timeout=30) as answer:
            return json.load(answer)

    def load(self, path, name):
        """`path` in the browser: its DOM once loaded, and the console lines it logged; a
        screenshot at each size under target/ui/."""
        url = f"{self.serve.url}{path}"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--enable-logging=stderr", "--v=0"]
        with tempfile.TemporaryDirectory() as profile:
            run = subprocess.run([self.browser, *flags, f"--user-data-dir={profile}",
                                  "--dump-dom", url], capture_output=True, timeout=120)
            for w, h in ((1280, 800), (390, 844)):
                shot = os.path.join(OUT, f"{name}-{w}x{h}.png")
                subprocess.run([self.browser, *flags, f"--user-data-dir={profile}",
                                f"--window-size={w},{h}", f"--screenshot={shot}", url],
                               capture_output=True, timeout=120)
                self.assertTrue(os.path.getsize(shot) > 10_000, shot)
        console = [line for line in run.stderr.decode(errors="replace").splitlines()
                   if ":CONSOLE" in line]
        return Dom(run.stdout.decode()), console

    def test_the_overview_shows_the_tenant_and_the_session_as_the_json_does(self):
        overview = self.get_json("/llm-context/ledger/sessions")
        dom, console = self.load("/ui", "overview")
        self.assertEqual(console, [])
        tenant = overview["tenants"][0]
        rows = dom.find("tr", class_="tenant")
        self.assertEqual([r[1]["data-tenant"] for r in rows], [tenant["tenant"]])
        session = [s for s in overview["sessions"] if s["session"] == SESSION][0]
        self.assertEqual(session["totals"]["requests"], REQUESTS)
        row = [r for r in dom.find("tr", class_="session") if r[1]["data-session"] == SESSION]
        self.assertEqual(len(row), 1)
        # The money in the cells is the JSON's, to the last digit.
        cells = [float(e[1]["data-usd"]) for e in dom.elements if "data-usd" in e[1]]
        for figure in ("actual_usd", "passthrough_usd", "saving_usd"):
            self.assertIn(tenant["totals"][figure], cells, figure)
            self.assertIn(session["totals"][figure], cells, figure)
        self.assertIn("Since", dom.find("p", class_="scope")[0][2].replace("since", "Since"))

    def test_the_session_page_has_one_point_per_request_and_the_jsons_figures(self):
        one = self.get_json("/llm-context/ledger/sessions/" + urllib.request.quote(SESSION, safe=""))
        path = "/ui/sessions/" + urllib.request.quote(SESSION, safe="") + "?tenant=-"
        dom, console = self.load(path, "session")
        self.assertEqual(console, [])
        requests = one["requests"]
        self.assertEqual(len(requests), REQUESTS)
        for series in ("client", "sent", "read", "actual", "passthrough"):
            points = [e for e in dom.find("circle", class_="point")
                      if e[1]["data-series"] == series]
            self.assertEqual(len(points), REQUESTS, series)
        sent = [float(e[1]["data-value"]) for e in dom.find("circle", class_="point")
                if e[1]["data-series"] == "sent"]
        self.assertEqual(sent, [float(r["sent_tokens"]) for r in requests])
        self.assertEqual(float(dom.find("dd", id="actual")[0][1]["data-usd"]),
                         one["totals"]["actual_usd"])
        self.assertEqual(float(dom.find("dd", id="passthrough")[0][1]["data-usd"]),
                         one["totals"]["passthrough_usd"])
        self.assertEqual(len(dom.find("tr", class_="request")), REQUESTS)
        # Offloading made the session cheaper than sending it unchanged.
        self.assertGreater(one["totals"]["passthrough_usd"], one["totals"]["actual_usd"])
        print(f"\nledger page: session {SESSION!r}: actual ${one['totals']['actual_usd']:.4f}, "
              f"pass-through ${one['totals']['passthrough_usd']:.4f} "
              f"({one['totals']['provenance']})", file=sys.stderr)

    def test_an_unknown_session_is_404(self):
        for path in ("/ui/sessions/nope", "/llm-context/ledger/sessions/nope"):
            with self.assertRaises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{self.serve.url}{path}", timeout=30)
            self.assertEqual(refused.exception.code, 404)


if __name__ == "__main__":
    unittest.main()
