"""A differential fuzzer of the exporter: random scriptable dynamic programs, both hosts against PyTorch.

From a seed, `generate.generate` writes a random `nn.Module` whose `forward` mixes the constructs of
`constructs.py` as real dynamic code writes them: if / nested if / `for i in range(n)` over an int
input, nested / `break` inside an `if` inside a loop / `return` from inside a loop or a nested loop /
while with a cap / a decoder's loop (layer, softmax, argmax appended, stop test) / reductions,
softmax and element reads of the carried tensor / conditions joined with `and`/`or`, negated with
`not`, `.any().item()` / host floats (`float(x.item())`, `math` functions, float arithmetic) /
random ops (dropout on in eval, bernoulli, rand_like: written so that the randomness cancels, see
`constructs.random_op`) / int, float and bool inputs / counters / List[int] / List[Tensor] / dynamic
batch / pooling views / RNN modules / dict constants, and (`idioms.py`) loops over the batch's rows
stacked back together and `for` loops over lists that grew at run time. `calibrate.calibrate` picks every threshold so
that each decision goes both ways on the inputs the program is checked with. `check.check_seed`
exports it, runs each host on every input (six finite ones that take the calibrated paths, then NaN,
inf, an out-of-range index) and compares it with the scripted model, and the compiled host with the
Python host; a run error is a failure, never a skip. A failure is saved as a self-contained
reproducer (`reproducer.py`). `campaign.py` runs many seeds in a worker process that may crash, and
prints the fallbacks grouped by reason and the compiled host's share by feature.

    python -m tests.fuzz run --count 100 --seed 0 --out /tmp/fuzz      # or: make fuzz N=100
    python -m tests.fuzz table /tmp/fuzz/results.jsonl
    python -m tests.fuzz show 17                                      # print one seed's program
"""
