#!/usr/bin/env python3
"""test_prepare DFLC: scripts/dflc-prepare end to end on the nano target and its ChatML template.

The masks are checked token by token against the template's rendering, independently of how the tool
finds them: every run of supervised tokens must decode to exactly one assistant message's text plus the
template's end of turn ("<|im_end|>\\n"), in order, and the unsupervised tokens to everything else (the
row decodes to the rendering). Then the options (--mask last, --thinking strip, --seq-len with
truncate/drop), every bad input (refused naming file:line and the field, nothing written; or skipped and
counted), --regenerate against a stand-in OpenAI-compatible server (retry, kill and resume, server down),
the sidecar's tokenizer record, `dflc check` on the rows (and refusing them when the record names another
tokenizer), and a 2-step `dflc train` on them.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepare_common import row_errors, rows, runs_of  # noqa: E402

try:
    from tokenizers import Tokenizer
    import jinja2  # noqa: F401  (dflc-prepare's)
except ImportError as e:
    print(f"SKIP: {e.name} missing (scripts/setup.sh --deps installs it)")
    sys.exit(77)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PREP = [sys.executable, os.path.join(ROOT, "scripts", "dflc-prepare")]
MODEL = os.path.join(ROOT, "examples", "models", "nano")
CHAT = os.path.join(ROOT, "examples", "data", "nano_chat.jsonl")
DFLC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "dflc")
tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
fails = 0
T = tempfile.mkdtemp(prefix="dflc_prepare_")


def check(ok, what):
    global fails
    if not ok:
        fails += 1
        print("FAIL:", what)


def run(args, **kw):
    return subprocess.run(PREP + args, capture_output=True, text=True, **kw)


def convs(path):
    out = []
    with open(path) as f:
        for l in f:
            o = json.loads(l)
            if "messages" in o:
                out.append([(m["role"], m["content"]) for m in o["messages"]])
            else:
                r = {"human": "user", "gpt": "assistant", "system": "system"}
                out.append([(r[m["from"]], m["value"]) for m in o["conversations"]])
    return out


# 1. all assistant turns, both input layouts, .gz output
out = os.path.join(T, "chat.jsonl.gz")
p = run([MODEL, CHAT, "-o", out])
check(p.returncode == 0, f"prepare exited {p.returncode}: {p.stderr}")
R, C = rows(out), convs(CHAT)
check(len(R) == len(C) == 5, f"{len(R)} rows for {len(C)} conversations")
for k, (row, conv) in enumerate(zip(R, C)):
    for e in row_errors(tok, row, conv, [c for r, c in conv if r == "assistant"]):
        check(False, f"row {k}: {e}")
    sup = sum(row["loss_mask"])
    check(sup > 0 and sup < len(row["loss_mask"]), f"row {k}: {sup} supervised")
side = json.load(open(out + ".prepare.json"))
h = hashlib.sha256(open(os.path.join(MODEL, "tokenizer.json"), "rb").read()).hexdigest()
check(side["tokenizer_sha256"] == h, "the sidecar's tokenizer hash")
check(side["counts"]["rows_out"] == 5 and side["counts"]["supervised"] == sum(sum(r["loss_mask"]) for r in R),
      "the sidecar's counts")
check("5 conversations -> 5 rows" in p.stdout and "supervised" in p.stdout, f"summary line: {p.stdout}")

# 2. --mask last: only the last assistant turn of each conversation
p = run([MODEL, CHAT, "-o", os.path.join(T, "last.jsonl"), "--mask", "last", "--quiet"])
check(p.returncode == 0 and p.stdout == "", f"--mask last: {p.returncode} {p.stdout} {p.stderr}")
for k, (row, conv) in enumerate(zip(rows(os.path.join(T, "last.jsonl")), C)):
    last = [c for r, c in conv if r == "assistant"][-1]
    check(runs_of(tok, row, 1) == [last + "<|im_end|>\n"], f"--mask last row {k}: {runs_of(tok, row, 1)}")

# 3. --thinking strip: the think block leaves the row
p = run([MODEL, CHAT, "-o", os.path.join(T, "strip.jsonl"), "--thinking", "strip", "--quiet"])
r3 = rows(os.path.join(T, "strip.jsonl"))[2]
check(runs_of(tok, r3, 1) == ["17 plus 25 is 42.<|im_end|>\n"], f"--thinking strip: {runs_of(tok, r3, 1)}")
check("<think>" in "".join(runs_of(tok, R[2], 1)), "--thinking keep (the default) keeps the block")

# 4. --seq-len: truncate (counted) or drop (counted)
lens = sorted(len(r["input_ids"]) for r in R)
cut = lens[2]  # rows longer than the median
p = run([MODEL, CHAT, "-o", os.path.join(T, "t.jsonl"), "--seq-len", str(cut)])
rt = rows(os.path.join(T, "t.jsonl"))
check(all(len(r["input_ids"]) <= cut for r in rt) and f"{sum(l > cut for l in lens)} truncated" in p.stdout,
      f"--seq-len {cut} truncate: {p.stdout}")
p = run([MODEL, CHAT, "-o", os.path.join(T, "d.jsonl"), "--seq-len", str(cut), "--long", "drop"])
check(len(rows(os.path.join(T, "d.jsonl"))) == sum(l <= cut for l in lens) and
      f"{sum(l > cut for l in lens)} over --seq-len" in p.stdout, f"--long drop: {p.stdout}")

# 5. bad input: each refused naming the line and the field, nothing written; skip counts them
good = open(CHAT).readline()
bad = {
    'not JSON': '{"messages": [',
    'unknown role "wizard"': '{"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "y"}]}',
    'messages[1]: needs a string "content"': '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant"}]}',
    'no assistant turn': '{"messages": [{"role": "user", "content": "x"}]}',
    '"messages" must be a non-empty list': '{"messages": []}',
    'no "messages" (OpenAI) or "conversations" (ShareGPT) field': '{"text": "hello"}',
    'conversations[0]: needs a string "from"': '{"conversations": [{"value": "x"}]}',
}
for what, line in bad.items():
    f = os.path.join(T, "bad.jsonl")
    o = os.path.join(T, "bad_out.jsonl")
    with open(f, "w") as w:
        w.write(good + line + "\n" + good)
    if os.path.exists(o):
        os.unlink(o)
    p = run([MODEL, f, "-o", o])
    check(p.returncode == 1 and f"bad.jsonl:2: " in p.stderr and what in p.stderr and not os.path.exists(o),
          f"bad input '{what}': rc {p.returncode}, stderr {p.stderr!r}, written {os.path.exists(o)}")
    p = run([MODEL, f, "-o", o, "--bad-rows", "skip"])
    check(p.returncode == 0 and len(rows(o)) == 2 and "1 bad" in p.stdout and "row skipped" in p.stderr,
          f"--bad-rows skip '{what}': {p.returncode} {p.stdout} {p.stderr}")
p = run([MODEL, os.path.join(T, "missing.jsonl"), "-o", os.path.join(T, "x.jsonl")])
check(p.returncode == 1 and "missing.jsonl" in p.stderr, f"missing input: {p.stderr}")
p = run([os.path.join(ROOT, "examples", "models", "tiny"), CHAT, "-o", os.path.join(T, "x.jsonl")])
check(p.returncode == 1 and "no chat template" in p.stderr and "--template" in p.stderr, f"no template: {p.stderr}")
with open(os.path.join(T, "broken.jinja"), "w") as w:
    w.write("{% for m in messages %}{{ m['content'] }")
p = run([MODEL, CHAT, "-o", os.path.join(T, "x.jsonl"), "--template", os.path.join(T, "broken.jinja")])
check(p.returncode == 1 and "broken.jinja:1: chat template" in p.stderr, f"broken template: {p.stderr}")

# 7. --regenerate against an OpenAI-compatible endpoint: a stand-in server here (the test machine serves
# no model), which answers "reply N to: <last user turn>", fails the first request with 503 (a retry),
# can be slowed down (the kill), and logs every request
import http.server
import signal
import threading
import time


class Srv(http.server.ThreadingHTTPServer):
    daemon_threads = True
    log, delay, fail_first = [], 0.0, True


class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        ok = self.path == "/v1/chat/completions" and isinstance(body.get("messages"), list)
        if srv.fail_first or not ok:
            srv.fail_first = False
            self.send_response(503 if ok else 404)
            self.end_headers()
            return
        time.sleep(srv.delay)
        last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
        srv.log.append(json.dumps(body["messages"]))
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": f"reply to: {last}"}}]})
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(reply.encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client was killed (the resume case)


srv = Srv(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
n_turns = sum(r == "assistant" for c in C for r, _ in c)
rg = os.path.join(T, "regen.jsonl")
p = run([MODEL, CHAT, "-o", rg, "--regenerate", url, "--concurrency", "3"])
check(p.returncode == 0, f"--regenerate: rc {p.returncode} {p.stderr}")
check(len(srv.log) == n_turns and len(set(srv.log)) == n_turns, f"--regenerate: {len(srv.log)} requests for {n_turns} turns")
for k, (row, conv) in enumerate(zip(rows(rg), C)):
    users = [c for r, c in conv if r == "user"]
    want, u = [], 0
    for r, c in conv:  # each assistant turn answers the user turn before it
        u += r == "user"
        if r == "assistant":
            want.append(f"reply to: {users[u - 1]}<|im_end|>\n")
    check(runs_of(tok, row, 1) == want, f"--regenerate row {k}: {runs_of(tok, row, 1)} != {want}")
# killed mid-run, then resumed: nothing asked twice but the conversation in flight, nothing lost
ref_rows = rows(rg)
for f in (rg, rg + ".regen.jsonl"):
    os.unlink(f)
srv.log.clear()
srv.delay = 0.4
pr = subprocess.Popen(PREP + [MODEL, CHAT, "-o", rg, "--regenerate", url, "--concurrency", "1", "--quiet"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(2.0)
pr.send_signal(signal.SIGKILL)
pr.wait()
time.sleep(srv.delay + 0.3)  # the request in flight at the kill reaches the log before it is read
cached = [json.loads(l) for l in open(rg + ".regen.jsonl")] if os.path.exists(rg + ".regen.jsonl") else []
check(0 < len(cached) < len(C) and not os.path.exists(rg), f"the kill: {len(cached)} conversations cached, output "
      f"written {os.path.exists(rg)}")
first = list(srv.log)
srv.log.clear()
srv.delay = 0.0
p = run([MODEL, CHAT, "-o", rg, "--regenerate", url, "--concurrency", "2"])
left = sum(sum(r == "assistant" for r, _ in c) for i, c in enumerate(C) if i >= len(cached))
check(p.returncode == 0 and len(rows(rg)) == len(C) and f"({len(cached)} from" in p.stdout,
      f"the resume: rc {p.returncode} {p.stdout} {p.stderr}")
check(len(srv.log) == left and not set(srv.log) & set(first[:sum(sum(r == "assistant" for r, _ in c) for c in C[:len(cached)])]),
      f"the resume asked {len(srv.log)} turns, want the {left} of the conversations not cached")
check(rows(rg) == ref_rows, "the resumed run's rows differ from the uninterrupted run's")
srv.shutdown()
srv.server_close()
# a server that is not there: refused naming the URL, after the retries
p = run([MODEL, CHAT, "-o", os.path.join(T, "down.jsonl"), "--regenerate", url, "--retries", "1"])
check(p.returncode == 1 and url in p.stderr and "no reply after 2 attempts" in p.stderr, f"server down: {p.stderr}")

# 6. the rows train: dflc check and two steps on the CPU
spec = open(os.path.join(ROOT, "examples", "nano.dfl")).read()
import re
spec = re.sub(r'"(\.\./|models/|data/)[^"]*"', lambda m: '"' + os.path.normpath(os.path.join(ROOT, "examples", m.group(0)[1:-1])) + '"', spec)
spec = re.sub(r'train *= *"[^"]*"', f'train = "{out}"', spec, count=1)
sp = os.path.join(T, "chat.dfl")
with open(sp, "w") as w:
    w.write(spec)
if os.path.exists(DFLC):
    p = subprocess.run([DFLC, "check", sp], capture_output=True, text=True)
    check(p.returncode == 0 and p.stderr == "", f"dflc check on the prepared rows: {p.stderr}")
    sd = json.load(open(out + ".prepare.json"))
    check(sd["tokenizer_bytes"] == os.path.getsize(os.path.join(MODEL, "tokenizer.json")), "the sidecar's tokenizer size")
    bad_sd = dict(sd, tokenizer_crc32=sd["tokenizer_crc32"] ^ 1)  # rows made with another tokenizer
    json.dump(bad_sd, open(out + ".prepare.json", "w"))
    p = subprocess.run([DFLC, "check", sp], capture_output=True, text=True)
    check(p.returncode == 1 and "was prepared with another tokenizer than the target's" in p.stderr and
          "scripts/dflc-prepare" in p.stderr, f"dflc check with another tokenizer's rows: rc {p.returncode} {p.stderr}")
    json.dump(sd, open(out + ".prepare.json", "w"))
    # the packed format (through dflc pack): the same rows, which check reads
    pk = os.path.join(T, "chat.dflpack")
    p = run([MODEL, CHAT, "-o", pk, "--dflc", DFLC, "--quiet"])
    check(p.returncode == 0 and os.path.getsize(pk) > 0 and not os.path.exists(pk + ".part.jsonl"),
          f"-o .dflpack: rc {p.returncode} {p.stderr}")
    with open(sp.replace(".dfl", "_packed.dfl"), "w") as w:
        w.write(spec.replace(out, pk))
    p = subprocess.run([DFLC, "check", sp.replace(".dfl", "_packed.dfl")], capture_output=True, text=True)
    check(p.returncode == 0, f"dflc check on the packed rows: {p.stderr}")
    p = subprocess.run([DFLC, "train", sp, "--steps", "2", "--out", os.path.join(T, "run"), "--no-export", "--no-eval"],
                       capture_output=True, text=True)
    check(p.returncode == 0 and "5 rows" in p.stdout + p.stderr, f"dflc train on the prepared rows: rc {p.returncode}\n"
          f"{p.stdout[-1500:]}{p.stderr[-1500:]}")
else:
    print(f"note: {DFLC} not built: dflc check/train on the rows not run")
print("FAILED" if fails else "passed")
sys.exit(1 if fails else 0)
