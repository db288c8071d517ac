# Shared by the weights tests (sourced after lib.sh): the committed Hugging
# Face GPT-2 fixture (tests/reference/make_hf_fixture.py), a config of its
# shape, and a training text whose bytes are all below its vocabulary of 50.
HF=$PLAIT_SOURCE_DIR/tests/reference/hf_gpt2_tiny.safetensors
REF=$PLAIT_SOURCE_DIR/tests/reference/hf_gpt2_tiny_ref.safetensors
CFG=$E2E_WORK/hf_tiny.ini
cat >"$CFG" <<INI
[run]
seed = 7
progress = off
[model]
n_layer = 2
n_head = 4
n_embd = 32
block_size = 24
vocab_size = 50
[data]
path = $E2E_WORK/small.txt
global_batch = 8
micro_batch = 2
[comm]
timeout = 60
INI
awk 'BEGIN { srand(1); s = " !#$%&()*+,-./01"; for (i = 0; i < 20000; i++) printf "%s", substr(s, 1 + int(rand() * 16), 1) }' \
  >"$E2E_WORK/small.txt"
