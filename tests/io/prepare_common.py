"""What test_prepare.py and test_prepare_server.py both check of scripts/dflc-prepare's rows on the nano
target: the rows as read back, and a row's masks token by token against nano's ChatML rendering, found
independently of how the tool finds them."""
import gzip
import json

END = "<|im_end|>\n"  # the template's end of turn: supervised with the assistant's text


def rows(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [json.loads(l) for l in f]


def runs_of(tok, row, v):
    """decoded text of each maximal run of tokens whose mask is v"""
    out, cur = [], []
    for i, m in zip(row["input_ids"], row["loss_mask"]):
        if m == v:
            cur.append(i)
        elif cur:
            out.append(tok.decode(cur, skip_special_tokens=False))
            cur = []
    if cur:
        out.append(tok.decode(cur, skip_special_tokens=False))
    return out


def chatml(turns):
    """nano's ChatML template (examples/models/nano/chat_template.jinja) over (role, content) pairs"""
    return "".join(f"<|im_start|>{r}\n{c}{END}" for r, c in turns)


def row_errors(tok, row, turns, supervised):
    """why row is not turns rendered with exactly the texts in `supervised` masked (each with END), in order"""
    errs = []
    if len(row["input_ids"]) != len(row["loss_mask"]):
        errs.append("input_ids and loss_mask lengths differ")
    if tok.decode(row["input_ids"], skip_special_tokens=False) != chatml(turns):
        errs.append("not the conversation's rendering")
    want = [c + END for c in supervised]
    got = runs_of(tok, row, 1)
    if got != want:
        errs.append(f"supervised runs {got} != {want}")
    return errs
