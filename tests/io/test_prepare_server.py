#!/usr/bin/env python3
"""test_prepare_server: scripts/dflc-prepare --regenerate against a real OpenAI-compatible server.

The server is Hugging Face `transformers serve` (transformers' own /v1/chat/completions server, on the
CPU through torch), started here on a free local port with the repository's nano target
(examples/models/nano: its safetensors, tokenizer.json and chat_template.jinja) and every request's body
logged. On the five conversations of examples/data/nano_chat.jsonl, greedy, a few tokens a reply:

1. a run: the server was asked exactly once for each assistant turn, with the conversation before it
   (earlier turns already regenerated); the replies stored in OUT.regen.jsonl are what the server
   answers when asked again directly; each row decodes to the template's rendering of the regenerated
   conversation, and its supervised tokens decode to exactly the replies (each with its end of turn);
2. a run killed (SIGKILL) once OUT.regen.jsonl holds some but not all conversations, then run again:
   the rows are identical to the uninterrupted run's, the second run asked only for the conversations
   not stored (never one stored before the kill), and OUT.regen.jsonl holds each conversation once.

torch, transformers and its serving extras are installed by `bash scripts/test.sh` (CI runs it) or `DFL_WITH_SERVER=1 bash scripts/setup.sh --deps`:
where they are missing this test fails, saying so.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepare_common import row_errors, rows  # noqa: E402

missing = []
for m in ("tokenizers", "jinja2", "torch", "transformers", "fastapi", "uvicorn"):
    try:
        __import__(m)
    except ImportError:
        missing.append(m)
if missing:
    print(f"FAIL: {', '.join(missing)} not installed: the real OpenAI-compatible server (transformers serve) "
          f"cannot start; run `DFL_WITH_SERVER=1 bash scripts/setup.sh --deps` (scripts/test.sh does)")
    sys.exit(1)
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PREP = [sys.executable, os.path.join(ROOT, "scripts", "dflc-prepare")]
MODEL = os.path.join(ROOT, "examples", "models", "nano")
CHAT = os.path.join(ROOT, "examples", "data", "nano_chat.jsonl")
MAX_TOKENS = "24"
READY_S = 240  # importing torch and transformers on a loaded 2-core machine
tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
T = tempfile.mkdtemp(prefix="dflc_prepare_server_")
LOG = os.path.join(T, "server.log")
t0 = time.time()
fails = 0


def check(ok, what):
    global fails
    if not ok:
        fails += 1
        print("FAIL:", what)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8")


def log_tail(n=3000):
    try:
        return open(LOG, errors="replace").read()[-n:]
    except OSError:
        return "(no log)"


def start_server():
    """transformers serve on a free port; (process, base URL). Exits the test when it does not come up."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=os.path.join(T, "hf"),
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", NO_COLOR="1")
    # the `transformers` console script's entry point, through this interpreter (no PATH lookup)
    launcher = ("import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; "
                "sys.exit(main())")
    for attempt in range(3):  # another process may take the port between the probe and the bind
        port = free_port()
        with open(LOG, "w") as log:
            srv = subprocess.Popen([sys.executable, "-c", launcher, "serve", MODEL, "--host", "127.0.0.1",
                                    "--port", str(port), "--device", "cpu", "--dtype", "float32",
                                    "--enable-log-requests", "--log-level", "debug"],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + READY_S
        while time.time() < deadline and srv.poll() is None:
            try:
                if get(base + "/health", timeout=2)[0] == 200:
                    return srv, base
            except OSError:
                pass
            time.sleep(0.25)
        if srv.poll() is None:
            stop_server(srv)
            print(f"FAIL: transformers serve not ready on {base} after {READY_S} s; its log:\n{log_tail()}")
            sys.exit(1)
        if "address already in use" not in log_tail().lower():
            break
    print(f"FAIL: transformers serve exited with {srv.returncode} before it was ready; its log:\n{log_tail()}")
    sys.exit(1)


def stop_server(srv):
    if srv.poll() is None:
        os.killpg(srv.pid, signal.SIGTERM)
        try:
            srv.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()


def requests_logged():
    """the messages of every chat request the server has received, in order (its debug log of bodies)"""
    out = []
    for l in open(LOG, errors="replace"):
        i = l.find(" body: {")
        if l.startswith("[transformers] Request ") and i > 0:
            try:
                out.append(json.dumps(json.loads(l[i + len(" body: "):])["messages"], sort_keys=True))
            except (ValueError, KeyError):
                pass
    return out


def conversations():
    out = []
    for l in open(CHAT):
        o = json.loads(l)
        if "messages" in o:
            out.append([{"role": m["role"], "content": m["content"]} for m in o["messages"]])
        else:
            r = {"human": "user", "gpt": "assistant", "system": "system"}
            out.append([{"role": r[m["from"]], "content": m["value"]} for m in o["conversations"]])
    return out


def regen_file(path):
    """the complete lines of OUT.regen.jsonl (a kill may cut the last one)"""
    if not os.path.exists(path):
        return []
    out = []
    for l in open(path, encoding="utf-8"):
        try:
            out.append(json.loads(l))
        except ValueError:
            pass
    return out


def prefixes(conv):
    """the requests a conversation makes: the messages before each assistant turn"""
    return [json.dumps(conv[:i], sort_keys=True) for i, m in enumerate(conv) if m["role"] == "assistant"]


def ask(base, model, msgs):
    body = json.dumps({"model": model, "messages": msgs, "max_tokens": int(MAX_TOKENS), "temperature": 0.0})
    req = urllib.request.Request(base + "/v1/chat/completions", data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


C = conversations()
n_turns = sum(len(prefixes(c)) for c in C)
srv, base = start_server()
try:
    import transformers
    print(f"transformers serve {transformers.__version__} (torch {__import__('torch').__version__}) ready on {base} "
          f"after {time.time() - t0:.1f} s")
    models = json.loads(get(base + "/v1/models")[1])["data"]
    model = models[0]["id"] if models else ""
    check(os.path.realpath(model) == os.path.realpath(MODEL), f"/v1/models serves {models}, not {MODEL}")
    url = base + "/v1"
    args = [MODEL, CHAT, "--regenerate", url, "--model", model, "--max-tokens", MAX_TOKENS]

    # 1. one run, two conversations at a time
    out = os.path.join(T, "regen.jsonl")
    p = subprocess.run(PREP + args + ["-o", out, "--concurrency", "2"], capture_output=True, text=True)
    check(p.returncode == 0 and f"regenerated {len(C)} conversations through {url}/chat/completions (0 from"
          in p.stdout, f"--regenerate: rc {p.returncode}\n{p.stdout}{p.stderr}\nserver log:\n{log_tail()}")
    if p.returncode != 0:
        raise SystemExit
    reg = regen_file(out + ".regen.jsonl")
    check(sorted(e["line"] for e in reg) == list(range(1, len(C) + 1)), f"{out}.regen.jsonl: lines "
          f"{[e['line'] for e in reg]}")
    regen = {e["line"]: e["messages"] for e in reg}
    asked = requests_logged()
    want = sorted(q for ln in regen for q in prefixes(regen[ln]))
    check(len(asked) == n_turns and sorted(asked) == want,
          f"the server got {len(asked)} requests for {n_turns} assistant turns, or not the conversations before them")
    R = rows(out)
    check(len(R) == len(C), f"{len(R)} rows for {len(C)} conversations")
    changed = 0
    for k, (row, conv) in enumerate(zip(R, C)):
        new = regen.get(k + 1, [])
        check([m["role"] for m in new] == [m["role"] for m in conv] and
              all(n == m for n, m in zip(new, conv) if m["role"] != "assistant"),
              f"conversation {k + 1}: the regeneration changed a turn that is not the assistant's")
        replies = [m["content"] for m in new if m["role"] == "assistant"]
        changed += sum(a != m["content"] for a, m in zip(replies, [m for m in conv if m["role"] == "assistant"]))
        for e in row_errors(tok, row, [(m["role"], m["content"]) for m in new], replies):
            check(False, f"row {k} (the regenerated conversation, the server's replies supervised): {e}")
    check(changed == n_turns, f"only {changed} of {n_turns} assistant turns differ from the dataset's")
    # the stored replies are the server's: ask it again directly, turn by turn (greedy, so the same)
    for ln, conv in sorted(regen.items()):
        for i, m in enumerate(conv):
            if m["role"] == "assistant":
                got = ask(base, model, conv[:i])
                check(got == m["content"], f"conversation {ln} turn {i}: stored {m['content']!r}, the server now "
                      f"says {got!r}")
    print(f"run: {len(R)} rows, {n_turns} replies from the server, e.g. {regen[1][-1]['content']!r} "
          f"({time.time() - t0:.1f} s)")

    # 2. killed once some but not all conversations are stored, then resumed
    kout = os.path.join(T, "killed.jsonl")
    for attempt in range(3):
        for f in (kout, kout + ".regen.jsonl"):
            if os.path.exists(f):
                os.unlink(f)
        n0 = len(requests_logged())
        pr = subprocess.Popen(PREP + args + ["-o", kout, "--concurrency", "1", "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while pr.poll() is None and not regen_file(kout + ".regen.jsonl") and time.time() < deadline:
            time.sleep(0.005)
        if pr.poll() is None:
            pr.send_signal(signal.SIGKILL)
        pr.wait()
        stored = regen_file(kout + ".regen.jsonl")
        if 0 < len(stored) < len(C):
            break
        print(f"note: the run ended (rc {pr.returncode}) with {len(stored)} of {len(C)} conversations stored before "
              f"the kill; again")
    check(0 < len(stored) < len(C) and not os.path.exists(kout),
          f"the kill: {len(stored)} of {len(C)} conversations stored, output written {os.path.exists(kout)}")
    time.sleep(1.0)  # the request in flight at the kill is logged by now
    n1 = len(requests_logged())
    p = subprocess.run(PREP + args + ["-o", kout, "--concurrency", "2"], capture_output=True, text=True)
    check(p.returncode == 0 and f"regenerated {len(C) - len(stored)} conversations" in p.stdout and
          f"({len(stored)} from" in p.stdout, f"the resume: rc {p.returncode}\n{p.stdout}{p.stderr}")
    resumed = requests_logged()[n1:]
    done_before = {e["line"] for e in stored}
    want = sorted(q for ln in regen if ln not in done_before for q in prefixes(regen[ln]))
    check(sorted(resumed) == want, f"the resume asked {len(resumed)} requests, want the {len(want)} turns of the "
          f"{len(C) - len(stored)} conversations not stored before the kill")
    check(not set(resumed) & {q for ln in done_before for q in prefixes(regen[ln])},
          "the resume asked again for a conversation stored before the kill")
    final = regen_file(kout + ".regen.jsonl")
    keys = [(e["line"], e["key"]) for e in final]
    check(len(keys) == len(set(keys)) == len(C), f"{kout}.regen.jsonl: {len(keys)} entries, "
          f"{len(set(keys))} distinct, for {len(C)} conversations")
    check(os.path.exists(kout) and rows(kout) == R, "the resumed run's rows differ from the uninterrupted run's")
    print(f"kill and resume: {len(stored)} conversations stored at the kill ({n1 - n0} requests), "
          f"{len(resumed)} asked after it ({time.time() - t0:.1f} s)")
except SystemExit:
    pass
finally:
    stop_server(srv)

if fails:
    print(f"(the server's log and the files: {T})")
else:
    shutil.rmtree(T, ignore_errors=True)
print(f"{'FAILED' if fails else 'passed'} in {time.time() - t0:.1f} s")
sys.exit(1 if fails else 0)
