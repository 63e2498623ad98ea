"""A differential fuzzer of the exporter: random scriptable dynamic programs, both hosts against PyTorch.

From a seed, `generate.generate` writes a random `nn.Module` whose `forward` mixes the constructs of
`constructs.py` (if / nested if / for with break / while with a cap / int, float and bool inputs /
counters / List[int] / List[Tensor] / dynamic batch / pooling views / RNN modules / dict constants),
and `calibrate.calibrate` picks every threshold so that each decision goes both ways on the inputs
the program is checked with. `check.check_program` exports it, runs both hosts on several inputs
(some with NaN, inf or an out-of-range index) and compares with the scripted model; a failure is
saved as a self-contained reproducer (`reproducer.py`). `campaign.py` runs many seeds in a worker
process that may crash, and prints the table of compiled-host fallbacks by reason.

    python -m tests.fuzz run --count 100 --seed 0 --out /tmp/fuzz      # or: make fuzz N=100
    python -m tests.fuzz table /tmp/fuzz/results.jsonl
    python -m tests.fuzz show 17                                      # print one seed's program
"""
