#!/bin/bash
# test_cli.sh DFLC: every dflc command as a user meets it when something is wrong: no arguments,
# --help, unknown options, options without their value, and wrong inputs (a missing file, a
# directory, a binary file, an empty file). Each case must exit with the expected status (2 for
# usage errors, 1 for bad input; verify uses 2 for any input it cannot check), print a message
# that says what is wrong, and never crash (no signal, no sanitizer report).
# Run from the repository root (ctest does): examples/ and tests/fixtures/ are read from there.
set -u
DFLC=${1:?usage: test_cli.sh PATH/TO/dflc}
[ -x "$DFLC" ] || { echo "test_cli.sh: $DFLC is not an executable"; exit 2; }
[ -f examples/nano.dfl ] || { echo "test_cli.sh: run from the repository root (no examples/nano.dfl)"; exit 2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/dfl_cli_XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
# Inputs that are wrong in each way a user meets: binary bytes are fresh each run, after a first
# byte that is never text (random bytes could start with a newline and move the first error to
# line 2, which the expected messages below do not allow).
printf '\377' > "$T/binary.dfl"
head -c 4095 /dev/urandom >> "$T/binary.dfl"
: > "$T/empty.dfl"
mkdir "$T/dir.dfl"
cp "$T/binary.dfl" "$T/binfix.json"; cp "$T/binary.dfl" "$T/binfix.safetensors"
echo '{}' > "$T/emptyfix.json"; : > "$T/emptyfix.safetensors"
mkdir -p "$T/notckpt/step-1" "$T/baddrafter"
echo '{' > "$T/baddrafter/config.json"
head -c 100 /dev/urandom > "$T/baddrafter/model.safetensors"
MISSING="$T/no/such/file.dfl"

fails=0 n=0
# expect RC REGEX ARGS...: dflc ARGS exits with RC and its output (stdout + stderr) matches REGEX.
expect() {
  local want=$1 re=$2; shift 2
  n=$((n + 1))
  timeout 120 "$DFLC" "$@" > "$T/out" 2>&1
  local rc=$? why=""
  if [ $rc -ge 124 ]; then why="crashed or hung (status $rc)"
  elif grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault' "$T/out"; then why="sanitizer report"
  elif [ $rc -ne "$want" ]; then why="exit status $rc, want $want"
  elif [ ! -s "$T/out" ]; then why="no message at all"
  elif ! grep -qE -- "$re" "$T/out"; then why="output does not match /$re/"
  fi
  if [ -n "$why" ]; then
    fails=$((fails + 1))
    echo "FAIL: dflc $*: $why; output:"
    head -20 "$T/out" | sed 's/^/    /'
  else
    echo "ok:   dflc $*  -> $rc: $(head -1 "$T/out" | cut -c1-110)"
  fi
}

# --- the driver
expect 2 'usage: dflc COMMAND'
expect 0 'usage: dflc COMMAND' --help
expect 2 "unknown command 'frobnicate'" frobnicate

# --- every command: --help (exit 0), no arguments and unknown options (exit 2). The six below
# must exist; any other command `dflc --help` lists gets the same checks.
cmds="check plan train eval export verify"
for c in $("$DFLC" --help 2>/dev/null | awk '/^commands:/ {on = 1; next} on && NF == 0 {exit} on {print $1}'); do
  case " $cmds " in *" $c "*) ;; *) cmds="$cmds $c" ;; esac
done
for cmd in $cmds; do
  expect 0 "usage: dflc $cmd" $cmd --help
  expect 0 "usage: dflc $cmd" $cmd -h
  expect 2 "usage: dflc $cmd" $cmd
  expect 2 "(unknown option|unexpected argument).*--no-such-option" $cmd --no-such-option
done

# --- commands that read a spec: missing, directory, binary, empty
for cmd in check plan train; do
  expect 1 "$MISSING: error: cannot open" $cmd "$MISSING"
  expect 1 'is a directory' $cmd "$T/dir.dfl"
  expect 1 'binary.dfl:1:[0-9]+: error: unexpected byte' $cmd "$T/binary.dfl"
  expect 1 'empty.dfl: error: missing section `target`' $cmd "$T/empty.dfl"
done
# build and bench (when this dflc has them) read a spec the same way
case " $cmds " in *" build "*)
  for f in "$MISSING" "$T/dir.dfl" "$T/binary.dfl" "$T/empty.dfl"; do expect 1 'error' build "$f" -o "$T/bo"; done
  expect 2 '-o needs a value' build examples/nano.dfl -o ;;
esac
case " $cmds " in *" bench "*)
  for f in "$MISSING" "$T/dir.dfl" "$T/binary.dfl" "$T/empty.dfl"; do expect 1 'error' bench "$f" --cpu --steps 1; done
  expect 2 '--steps needs a positive integer' bench examples/nano.dfl --steps abc ;;
esac
expect 1 "$MISSING: error: cannot open" eval "$MISSING" --drafter "$T/baddrafter"
expect 2 'one spec' check examples/nano.dfl examples/tiny.dfl
expect 2 'one spec' plan examples/nano.dfl examples/tiny.dfl

# --- plan options
expect 2 '--device needs a value' plan examples/nano.dfl --device
expect 2 '--yaml needs a value' plan examples/nano.dfl --yaml
expect 2 '--device wants a device number' plan examples/nano.dfl --device x
expect 2 '--device 9, but the topology has 1 device' plan examples/nano.dfl --device 9
expect 2 '--budget wants a size' plan examples/nano.dfl --budget lots
expect 1 "cannot write '$T/no/dir/p.yaml'" plan examples/nano.dfl --quiet --yaml "$T/no/dir/p.yaml"
expect 1 'cannot open the plan file' plan examples/nano.dfl --quiet --diff "$MISSING"
expect 1 'is a directory' plan examples/nano.dfl --quiet --diff "$T/dir.dfl"
expect 1 'not valid YAML' plan examples/nano.dfl --quiet --diff "$T/binary.dfl"
expect 1 'not a dflc plan file' plan examples/nano.dfl --quiet --diff "$T/empty.dfl"

# --- train options (all rejected before any step runs)
expect 2 '--steps needs an integer' train examples/nano.dfl --steps
expect 2 '--steps needs an integer' train examples/nano.dfl --steps abc
expect 2 '--steps needs an integer' train examples/nano.dfl --steps -3
expect 2 '--steps 99999999999999999999 does not fit in 64 bits' train examples/nano.dfl --steps 99999999999999999999
expect 2 '--cpu-threads needs an integer' train examples/nano.dfl --cpu-threads 0
expect 1 'no such directory' train examples/nano.dfl --resume "$MISSING" --out "$T/tr"
expect 1 'not a checkpoint' train examples/nano.dfl --resume "$T/notckpt" --out "$T/tr"
# a pipeline spec (4 CPU devices) takes the same options; what applies only to one device is refused
expect 2 'unplanned applies to single-device runs' train examples/nano-pipeline.dfl --unplanned --out "$T/tr"
expect 2 'cuda, but the topology.s devices are CPUs' train examples/nano-pipeline.dfl --cuda --out "$T/tr"
expect 1 'not a checkpoint' train examples/nano-pipeline.dfl --resume "$T/notckpt" --out "$T/tr"

# --- eval
expect 2 'usage: dflc eval' eval examples/nano.dfl
expect 2 '--drafter needs a path' eval examples/nano.dfl --drafter
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  expect 1 'cuda, but no CUDA device is usable' eval examples/nano.dfl --drafter "$T/baddrafter" --cuda
fi
expect 1 'not a drafter directory' eval examples/nano.dfl --drafter "$MISSING"
expect 1 'not a drafter directory' eval examples/nano.dfl --drafter "$T/dir.dfl"
expect 1 'config.json.*not valid JSON' eval examples/nano.dfl --drafter "$T/baddrafter"
# --data is read before the drafter, so a bad data file is reported even with a bad drafter
expect 1 'no/such/file.dfl: cannot open' eval examples/nano.dfl --drafter "$T/baddrafter" --data "$MISSING"
expect 1 'dir.dfl: is a directory' eval examples/nano.dfl --drafter "$T/baddrafter" --data "$T/dir.dfl"
expect 1 'empty.dfl: empty file' eval examples/nano.dfl --drafter "$T/baddrafter" --data "$T/empty.dfl"
expect 2 '--data needs' eval examples/nano.dfl --drafter "$T/baddrafter" --data

# --- export
expect 2 'usage: dflc export' export "$T/notckpt"
expect 2 '-o needs a path' export "$T/notckpt" -o
expect 2 '--spec needs a path' export "$T/notckpt" -o "$T/exp" --spec
expect 1 'no such directory' export "$MISSING" -o "$T/exp"
expect 1 'binary.dfl: not a directory' export "$T/binary.dfl" -o "$T/exp"
expect 1 'binary.dfl: not a directory' train examples/nano.dfl --resume "$T/binary.dfl" --out "$T/tr"
ln -s loop_b "$T/loop_a"; ln -s loop_a "$T/loop_b"
expect 1 'loop_a: a symbolic link loop' export "$T/loop_a" -o "$T/exp"
expect 1 'not a checkpoint' export "$T/notckpt" -o "$T/exp"

# --- verify (2: the fixture cannot be checked)
expect 2 'unable to open' verify "$MISSING"
expect 2 'binfix.json:1: ' verify "$T/binfix"
expect 2 'not a safetensors file' verify "$T/emptyfix"
expect 2 '--tol needs a positive number' verify tests/fixtures/dflash_step_public --tol abc
expect 2 '--vocab-chunk needs a positive integer' verify tests/fixtures/dflash_step_public --vocab-chunk -1

echo "test_cli: $((n - fails)) of $n cases passed"
[ $fails -eq 0 ]
