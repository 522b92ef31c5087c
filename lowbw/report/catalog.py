"""The number macros of the paper: one explicit catalogue of every ``\\newcommand`` the report may write into
``paper/generated/numbers.tex``, what each holds and in which unit, and the explicit maps from measured
settings (inputs, models, densities) to the words in those names.

Names never derive from grid values or preset names, so renaming a preset cannot silently drop a
sentence: a setting outside the maps below is an error naming it, and ``tests/test_paper_sources.py``
checks that the prose of ``paper/sections`` uses exactly these names. Every experiment also has a
``<Prefix>NotRun`` macro (why it has no data) that the report writes in place of its numbers when the
profile did not run it; ``paper/paper.tex``'s ``\\ifmeasured`` prints a sentence only where its macro exists.
Beside the experiments' macros: ``BuildStores`` (the measurement stores the build read, :mod:`lowbw.report.stores`)
and the front sections' ``Claim...`` verdicts (:mod:`lowbw.report.claims`), both written by the build.
"""

from __future__ import annotations

from lowbw.report.catalog_e12 import E12_MACROS  # E12's (Charles et al.'s DiLoCo scaling at micro scale)
from lowbw.report.claims import SENTENCES, value  # the front sections' result sentences (not the Results')

__all__ = ["PREFIX", "SYSTEM_PREFIX", "SYSTEM", "BUILD_PREFIX", "BUILD", "MACROS", "E1_ALGS", "E1_EXCHANGE_METHODS",
           "E2_INPUTS", "E3_RUN_MODELS", "E5_RULES", "E7_DENSITIES", "E8_WORKERS", "E9_LINKS", "E9_METHODS",
           "E10_NETWORKS",
           "E10_MLP_NETWORKS", "E10_LEAD_NETWORKS", "CLAIMS", "AXIS_NOT_RUN", "not_run_macro", "not_run_macros",
           "check_numbers", "word"]

PREFIX = {"e1": "EOne", "e2": "ETwo", "e3": "EThree", "e4": "EFour", "e5": "EFive", "e6": "ESix",
          "e7": "ESeven", "e8": "EEight", "e9": "ENine", "e10": "ETen",
          # the same experiments on the character-level language model (E4, E9, E10's main workload)
          "e4lm": "EFourLm", "e9lm": "ENineLm", "e10lm": "ETenLm", "e11": "EEleven",
          # the language model near convergence, each method tuned (lm_evidence profile or its stored runs)
          "e9lmc": "ENineLmc", "e12": "ETwelve"}

# E1's packed exchange (lowbw.report.e1_exchange): bench exchange's method presets -> their words in EOneExch*
E1_EXCHANGE_METHODS = {"powersgd": "Powersgd", "topk1": "Topk"}
# E1's latency-axis algorithms -> their words in the prose's list of errors (EOneLatErrPerAlg)
E1_ALGS = {"ring": "ring", "tree": "tree", "ps": "parameter server", "butterfly": "butterfly"}
# bench/compressors.py input kind -> its word in E2's names
E2_INPUTS = {"gaussian": "Gaussian", "student_t3": "StudentT", "resnet20": "Gradient"}
# model of E3's measured dense runs -> its word
E3_RUN_MODELS = {"mlp": "Mlp", "cnn": "Cnn"}
# E5's dynamic batch-size rules (config dynamic_batch: eq. dynbatch, the draft's formula) -> their words
E5_RULES = {"text": "Text", "literal": "Literal"}
# E7's fixed top-k density (compressor_args.ratio) -> its word
E7_DENSITIES = {0.1: "Ten", 0.01: "One", 0.001: "Tenth"}
# E8's numbers of workers whose compute slow-down the prose quotes -> their words
E8_WORKERS = {2: "Two", 4: "Four"}
# E9's links, each run re-timed at them: word -> (Mbit/s per worker, one-way latency in ms). "Far" is a
# cross-continent link (tens of ms one way, as Mumbai - San Francisco)
E9_LINKS = {"Slow": (1.0, 0.5), "Mid": (10.0, 0.5), "Far": (10.0, 50.0)}
# E9's methods with numbers of their own (lowbw.report.e9), per experiment key: method -> its word in the macro
# names (the language model's overlapped and gossip DiLoCo variants and the diloco16 they are placed against)
E9_METHODS = {"e9lm": {"diloco16": "Diloco", "diloco16_delayed": "Delayed", "diloco16_eager": "Eager",
                       "noloco16": "Noloco"}}
# E10's networks (experiment e10_<network>) other than "even" -> their words; the MLP's grid (medium profile) runs
# the first four, the language model's all (issue 48 added the lossy and churning ones)
E10_NETWORKS = {"oneslow": "OneSlow", "asym": "Asym", "trace": "Trace", "straggler": "Straggler", "loss1": "LossOne",
                "loss10": "LossTen", "churn": "Churn"}
E10_MLP_NETWORKS = ("oneslow", "asym", "trace", "straggler")
# the networks whose method at the wall-clock budget the prose names (lowbw.report.e10's _budget_numbers)
E10_LEAD_NETWORKS = ("loss1", "loss10", "churn")


def _per_link(prefix: str) -> dict[str, str]:
    """E9's numbers for each re-timing link (``E9_LINKS``): the fastest per-step and every-H method to the target."""
    return {f"{prefix}{w}{k}": f"{what} ({w.lower()} link)" for w in E9_LINKS for k, what in (
        ("Link", "the link (bandwidth, latency)"),
        ("StepBest", "fastest per-step method to the target"), ("StepTtt", "its mean time (duration)"),
        ("StepSpeedup", "dense time / its time"),
        ("RareBest", "fastest every-H-steps method to the target"), ("RareTtt", "its mean time (duration)"),
        ("RareSpeedup", "dense time / its time"))}


def _per_method(key: str, quality: str) -> dict[str, str]:
    """E9's numbers for each method of ``E9_METHODS[key]``: its final quality (word ``quality``) and whether and how
    it reached the target (bytes and time on the mid, 10 Mbit/s, link)."""
    return {f"{PREFIX[key]}{w}{k}": f"{m}: {what}" for m, w in E9_METHODS[key].items() for k, what in (
        (quality, "final quality, mean over seeds"),
        ("Reached", "words: 'reaches the target after X MB per worker, in T at 10 Mbit/s' where every seed did, "
                    "else how many seeds did"))}


# E10's numbers at a network's wall-clock budget (its shortest run; every seed of every method counted)
_BUDGET = (("Budget", "the network's wall-clock budget: its shortest run (duration)"),
           ("Lead", "the method with the best quality at that budget (mean over seeds)"),
           ("LeadValue", "its quality there"), ("LeadNext", "the runner-up"),
           ("LeadBy", "the leader's margin over the runner-up (quality units)"))
# ... and on the lossy networks, what the loss cost dense training
_LOSSY = (("DensePpl", "dense's perplexity there after its whole even-network run's wall-clock / at that run's end, "
                        "less 1 (%)"),
          ("DenseFinalGap", "dense's final validation loss there less on the even network, same steps (signed, "
                            "nats/char)"))


# per network: each method's time to DiLoCo's final loss against DiLoCo's whole run (lowbw.report.e10)
_VS_DILOCO = (("VsDiloco", "per method, DiLoCo's whole run / its time to DiLoCo's final loss there, fastest first "
                           "(list)"),
              ("VsDilocoBest", "the method that reaches DiLoCo's final loss soonest"),
              ("VsDilocoBestRatio", "how many times sooner than DiLoCo (ratio)"))


def _per_network(prefix: str, networks) -> dict[str, str]:
    """E10's numbers for each of ``networks`` (not the even one): slow-downs against the even network; on the
    networks of ``E10_LEAD_NETWORKS`` the method leading at the wall-clock budget, on the lossy ones what the loss
    cost dense training. Churn refuses dense (every other method than the three that tolerate it): no ratio."""
    out = {}
    for net in networks:
        w = E10_NETWORKS[net]
        keys = [("Links", "the network's links (words)"),
                ("Best", "the method slowed least (time to target there / on the even network)"),
                ("BestRatio", "its slow-down (ratio)"), ("Worst", "the method slowed most"),
                ("WorstRatio", "its slow-down (ratio)"), ("DenseRatio", "dense training's slow-down (ratio)"),
                ("RunBest", "the method whose whole run (the same samples) slowed least"),
                ("RunBestRatio", "that slow-down (ratio)")]
        if prefix == "ETenLm" and net != "churn":  # DiLoCo with the asynchronous methods (churn refuses it)
            keys += list(_VS_DILOCO)
        if net == "churn":
            keys = [k for k in keys if k[0] != "DenseRatio"]
        if net in E10_LEAD_NETWORKS:
            keys += list(_BUDGET)
        if net.startswith("loss"):
            keys += list(_LOSSY)
        out.update({f"{prefix}{w}{k}": f"{what} ({net} network)" for k, what in keys})
    return out


_SCHEMES = {  # E5 and E6 share their summary (lowbw.report.schemes)
    "Target": "target test accuracy (%)",
    "Focus": "the bandwidth time-to-accuracy is quoted at (Mbit/s)",
    "Seeds": "seeds per configuration",
    "BestAcc": "highest mean final test accuracy (%)",
    "Best": "the configuration with it",
    "SigCount": "configurations whose final accuracy differs from the baseline (Welch p<0.05)",
    "Groups": "configurations",
    "Fastest": "the configuration first to the target (all seeds reached it)",
    "FastestTtt": "its mean virtual time to the target (duration)",
}

MACROS: dict[str, str] = {
    # E1 collectives
    "EOneBoundRate": "link rate of the bound comparison (Mbit/s)",
    "EOneBoundMinSize": "smallest message of the bound comparison (MB)",
    "EOneRingBoundFracMin": "ring's worst share of the bandwidth-optimal bound (%)",
    "EOneRingBoundFracMean": "ring's mean share of the bound (%)",
    "EOneRingOverNativeMedian": "ring time / gloo all-reduce time, median",
    "EOneRingOverNativeMax": "ring time / gloo all-reduce time, worst",
    "EOneTolerance": "the model's error tolerance (%)",
    "EOneModelErrMedian": "alpha-beta model's median |error| (%)",
    "EOneModelErrMax": "its largest |error| (%)",
    "EOneModelWithinTen": "settings within the tolerance (%)",
    "EOneModelWorstAlg": "algorithm with the largest error",
    "EOneModelWorstAlgErr": "that error (%)",
    "EOneModelAlgsWithinTen": "algorithms with every setting within the tolerance",
    "EOneModelAlgs": "algorithms with a model prediction",
    "EOneSettings": "measured (workers, rate, size) settings",
    "EOneTopWinner": "algorithm fastest in most settings",
    "EOneTopWinnerCount": "settings it won",
    "EOneEmulation": "how the links were emulated",
    # E1's packed exchange (lowbw.report.e1_exchange; runs/bench/exchange.json)
    "EOneExchNotRun": "why the packed exchange has no data in this profile",
    "EOneExchModel": "the model whose gradient is exchanged", "EOneExchWorkers": "workers",
    "EOneExchRate": "link rate (Mbit/s)", "EOneExchDelay": "one-way delay (ms)",
    "EOneExchDenseS": "dense's flat all-reduce of one step (s)",
    "EOneExchLoadMax": "highest 1-min load while measuring",
    **{f"EOneExch{w}{k}": f"{m}: {what}" for m, w in {"PowerSGD": "Powersgd", "top-k 1%": "Topk"}.items()
       for k, what in (("LayerS", "one step's exchange per tensor (s)"), ("BucketS", "bucketed (s)"),
                       ("LayerCalls", "calls per tensor"), ("BucketCalls", "calls bucketed"),
                       ("BucketBound", "bucketed time / the bound of its calls"))},
    "EOneExchWireDropMax": "bucketed against per tensor: the largest drop in bytes on the wire (%)",
    "EOneExchPayloadChangeMax": "bucketed against per tensor: the largest change of the payload bytes (%)",
    # E1's latency axis (lowbw.report.e1_latency; runs/bench/collectives_latency.json)
    "EOneLatNotRun": "why the latency axis has no data in this profile",
    "EOneLatDelays": "one-way link delays measured (ms, a list)",
    "EOneLatRates": "link rates measured (Mbit/s, a list)",
    "EOneLatWorkersMin": "fewest workers", "EOneLatWorkersMax": "most workers",
    "EOneLatSizeMinKB": "smallest message (KB per rank)", "EOneLatSizeMaxMB": "largest message (MB per rank)",
    "EOneLatSettings": "measured (algorithm, workers, rate, delay, size) settings",
    "EOneLatCells": "testbeds measured (workers, rate, delay)",
    "EOneLatSkippedCells": "testbeds not built: beyond the userspace link emulator",
    "EOneLatEmulatorLimit": "summed uplink rate the link emulator carries (Mbit/s)",
    "EOneLatErrMedian": "calibrated model's median |error| (%)", "EOneLatErrMax": "its largest |error| (%)",
    "EOneLatWithinTen": "settings within the tolerance (%)",
    "EOneLatAlgsWithinTen": "algorithms with every setting within the tolerance",
    "EOneLatAlgs": "algorithms measured",
    "EOneLatErrPerAlg": "each measured algorithm's largest |model error| (list)",
    "EOneLatDelayedErrMax": "largest |model error| with added delay (%)",
    "EOneLatDelayedWithinTen": "settings with added delay within the tolerance (%)",
    "EOneLatZeroErrMax": "largest |model error| without added delay (%)",
    "EOneLatZeroFastErrMax": "the same among calls under 10 ms (%)",
    "EOneLatHandshakeRatio": "gloo's handshake wait / the one-way latency, median over delayed testbeds",
    "EOneLatCrossCount": "testbeds whose fastest algorithm changes within the measured sizes",
    "EOneLatCrossRatioMedian": "measured / predicted crossover size, median",
    "EOneLatCrossRatioWorst": "the same ratio's worst factor (max of r, 1/r)",
    "EOneLatWinnerAgree": "sizes where the model picks the measured fastest algorithm (%)",
    "EOneLatLoadMax": "highest 1-minute load average during the measurement",
    "EOneLatLateStarts": "timed calls a rank began late (the common start missed)",
    "EOneLatIssueErrPerAlg": "each algorithm's largest |model error| over 64 KB..10 MB (list)",
    "EOneLatIssueErrMax": "largest |model error| over 64 KB..10 MB (%)",
    "EOneLatIssueWithinTen": "settings of 64 KB..10 MB within the tolerance (%)",
    "EOneLatIssueAlgsWithinTen": "algorithms within the tolerance at every setting of 64 KB..10 MB",
    "EOneLatIssueAlgs": "algorithms measured at 64 KB..10 MB",
    "EOneLatSoftwarePerStep": "each algorithm's software cost per step, median over testbeds (ms, a list)",
    "EOneLatSoftwareMin": "smallest software cost per step of any algorithm and testbed (ms)",
    "EOneLatSoftwareMax": "largest software cost per step of any algorithm and testbed (ms)",
    "EOneLatSoftwareTestbeds": "testbeds with a measured software cost",
    "EOneLatSoftwareSeparateRun": "testbeds whose software cost came from a later calibration-only run",
    "EOneLatStartLag": "each algorithm's start lag per call (latest rank's first message), "
                       "median over traced testbeds (ms, a list)",
    "EOneLatStartLagMin": "smallest start lag per call of any algorithm and traced testbed (ms)",
    "EOneLatStartLagMax": "largest start lag per call of any algorithm and traced testbed (ms)",
    "EOneLatStartLagTestbeds": "testbeds whose tiny calls were traced for the start lag",
    "EOneLatTraceRate": "link rate of the heap tree's traces (Mbit/s)",
    "EOneLatTraceDelay": "the shortest traced delay (ms)", "EOneLatTraceSizeKB": "the smallest traced message (KB)",
    "EOneLatTraceLeafTwoMs": "there, when leaf 2 has the root's second stream (ms from the call's start)",
    "EOneLatTraceLeafThreeMs": "there, when leaf 3 has its message through rank 1 (ms)",
    "EOneLatTraceCount": "traced (delay, size) settings of the heap tree",
    "EOneLatTraceDelays": "traced delays (ms, a list)",
    "EOneLatTraceHeadMinKB": "the root's first stream's head start on its uplink, smallest (KB)",
    "EOneLatTraceHeadMaxKB": "the same, largest (KB)",
    # E2 compressors
    "ETwoNumel": "elements of the benchmark tensor (millions)",
    "ETwoMinThroughput": "slowest of our configurations (GB/s)",
    "ETwoSlowestInput": "the input it was slowest on (words)",
    "ETwoSlowest": "its method",
    "ETwoThroughputTarget": "the throughput target (GB/s)",
    "ETwoBelowTarget": "how many of our configurations fall below the target (words, with the verb)",
    "ETwoMethods": "our methods",
    **{f"ETwo{q}{w}": d for w in E2_INPUTS.values() for q, d in (
        ("OursErr", "relative L2 error of our 8-bit non-linear block-wise code (%)"),
        ("BnbErr", "relative L2 error of bitsandbytes' block-wise code (%)"),
        ("SpeedRatio", "our throughput / bitsandbytes' throughput (fastest of alternating calls)"),
        ("SpeedRatioMedian", "the same ratio of the alternating calls' medians"))},
    "ETwoHeadToHeadCalls": "alternating calls of each in the head-to-head",
    # E3 dense training time
    "EThreeWorkers": "workers of the minimum training time",
    "EThreeAccel": "the accelerator whose compute the minimum assumes",
    "EThreeModel": "the model the prose quotes (ResNet-50 where measured)",
    "EThreeLowMbit": "lowest report bandwidth (Mbit/s)",
    "EThreeHighMbit": "highest report bandwidth (Mbit/s)",
    "EThreeMinLow": "its minimum training time at the lowest bandwidth (duration)",
    "EThreeMinHigh": "its minimum training time at the highest bandwidth (duration)",
    "EThreeComputeAccel": "its pure computation time on the accelerator (duration)",
    "EThreeComputeCpu": "its pure computation time on this CPU (duration)",
    "EThreeDenseWorkers": "workers of the measured dense runs",
    **{f"EThreeComm{w}{b}": f"communication share of a step, {m} dense runs, {b.lower()}est bandwidth (%)"
       for m, w in E3_RUN_MODELS.items() for b in ("Low", "High")},
    # E4 compression in training
    "EFourTarget": "target test accuracy (%)",
    "EFourFocus": "bandwidth of the prose (Mbit/s)",
    "EFourSeeds": "seeds per method",
    "EFourTttDense": "dense's mean time to the target (duration; -- unless every seed reached it)",
    "EFourBest": "method first to the target (all seeds reached it)",
    "EFourBestTtt": "its mean virtual time to the target (duration)",
    "EFourBestSpeedup": "dense's time / its time",
    "EFourSigWorse": "methods with a significantly lower final accuracy than dense",
    "EFourSigWorseList": "those methods",
    "EFourNever": "methods no seed of which reached the target",
    "EFourPartial": "methods only some of whose seeds reached the target: how many, median time over all seeds",
    "EFourBestPerMbit": "the fastest method at every report bandwidth (list)",
    # E5 batch size, E6 local SGD / households
    **{f"EFive{k}": d for k, d in _SCHEMES.items()},
    # E5's two dynamic batch rules trained side by side (lowbw.report.dynbatch); words chosen by the report
    "EFiveRuleOptimizer": "the optimiser both rules trained with",
    "EFiveRuleBatch": "the initial global batch of both rules",
    "EFiveRuleCap": "the cap on the global batch",
    "EFiveRuleFirstEpoch": "epochs trained at the first evaluation, where the batch first changes (mean)",
    "EFiveRuleFirstRatio": "E0/Ee there, mean over both rules' seeds",
    "EFiveRuleCapOrder": "whether the draft's formula reaches the cap sooner than, later than or with the "
                         "corrected rule (words)",
    "EFiveRuleAccDiff": "draft's formula's final test accuracy less the corrected rule's, absolute (points)",
    "EFiveRuleAccDir": "higher, lower or no higher (words)",
    "EFiveRuleAccP": "Welch's p of that difference",
    "EFiveRuleAccSig": "significant or not significant (words)",
    **{f"EFiveRule{w}{k}": f"{what} ({rule} rule)" for rule, w in E5_RULES.items() for k, what in (
        ("FirstAsked", "the batch factor the rule asks for at the first evaluation, before the cap (a value or "
                       "range over seeds)"),
        ("FirstBatch", "the global batch it sets there (a value or range over seeds)"),
        ("CapWhen", "when its batch reaches the cap: 'after X epochs[, at its first evaluation]' or in how "
                    "many seeds (words)"),
        ("Steps", "steps (exchanges) of its whole run, mean over seeds"),
        ("Acc", "its final test accuracy, mean over seeds (%)"),
        ("Reach", "whether and when it reaches the target at the focus bandwidth (words)"))},
    **{f"ESix{k}": d for k, d in _SCHEMES.items()},
    "ESixSampleRatio": "samples of the most overlapping assignment / disjoint",
    **{f"ESixOverlap{w}{k}": f"{what} ({scheme})" for w, scheme in (
        ("Sync", "synchronous training"), ("Local", "local SGD"), ("Households", "households"))
       for k, what in (("", "|overlapping - disjoint| final test accuracy (points of %)"),
                       ("Dir", "its direction: higher, lower or no higher (equal) (words, chosen by the report)"),
                       ("P", "Welch p of overlapping against disjoint"),
                       ("Sig", "whether that is significant (words)"))},
    # E7 fluctuating bandwidth
    "ESevenTarget": "target test accuracy (%)",
    "ESevenAdaptiveSeeds": "how many of the adaptive method's seeds reached the target (words)",
    "ESevenTttAdaptive": "adaptive choice's median virtual time to the target over all seeds, a seed that never "
                         "arrived counting as the slowest (duration or never)",
    "ESevenAccAdaptive": "its mean final test accuracy (%)",
    **{f"ESeven{q}Fixed{w}": d for w in E7_DENSITIES.values() for q, d in (
        ("Ttt", "median virtual time to the target of a fixed density over all seeds (duration or never)"),
        ("Acc", "mean final test accuracy of a fixed density (%)"),
        ("Density", "that top-k density"))},
    "ESevenBestFixed": "the fixed density first to the target",
    "ESevenAdaptiveVsBest": "best fixed median time / adaptive median time (all seeds)",
    "ESevenAdaptiveP": "Mann-Whitney U p of adaptive vs best fixed time to target over all seeds",
    "ESevenSignificance": "whether that difference is significant (words)",
    # E8 simulator vs testbed
    "EEightTolerance": "the step-time tolerance (%)",
    "EEightCells": "compared cells",
    "EEightSmallN": "smallest number of workers",
    "EEightWithinTen": "cells within the tolerance",
    "EEightTargetCells": "cells of the issue's target (smallest N; <=100 Mbit/s or link-bound)",
    "EEightRepeatCells": "cells measured more than once (each reported as its median repeat)",
    "EEightRepeats": "the most repeats of a cell",
    "EEightRepeatRange": "the widest range of a cell's step-time errors over its repeats (points of %)",
    "EEightDDPComputeMeasured": "the DDP cells' measured compute per step at the smallest N, median (ms)",
    "EEightDDPComputePredicted": "the simulator's compute for them, median (ms)",
    "EEightFastRate": "the fastest rate of the grid, above 100 Mbit/s (Mbit/s)",
    "EEightFastLinkBound": "methods link-bound there at the smallest N (list)",
    "EEightFastCPUBound": "methods not link-bound there (list)",
    "EEightTargetWorst": "worst |error| among them (%)",
    "EEightTargetWithin": "of them within the tolerance",
    "EEightWorstErr": "largest signed error (%)",
    "EEightWorstMethod": "its method",
    "EEightWorstWhere": "its rate and N",
    "EEightWorstPerMethod": "worst |error| per method (list)",
    "EEightNominalWorst": "worst |error| of the uncalibrated clock at the smallest N (%)",
    "EEightNominalWorstMethod": "its method",
    "EEightOverheadMs": "the clock's per-message software cost (each cell's calls replayed), median (ms)",
    "EEightOverheadMin": "its minimum over cells (ms)",
    "EEightOverheadMax": "its maximum over cells (ms)",
    "EEightBackToBackMs": "probed per-message cost of calls back to back, median over probes (ms)",
    "EEightBackToBackMin": "its minimum (ms)",
    "EEightBackToBackMax": "its maximum (ms)",
    "EEightGapMin": "CPU work between calls in the per-layer cells, minimum (ms)",
    "EEightGapMax": "its maximum (ms)",
    "EEightReplayMin": "per-message cost of the per-layer cells' replayed calls on the slowest worker, min (ms)",
    "EEightReplayMax": "its maximum (ms)",
    "EEightReplayPaired": "per-layer cells (median repeats) whose replay and curve at the mean gap are compared",
    "EEightReplayBelow": "of them where the replayed calls (last worker in) cost less than at the mean gap",
    "EEightReplayBelowPct": "by how much, median over those cells (%)",
    **{f"EEightComputeScale{w}": f"compute slow-down with {n} workers sharing the cores" for n, w in
       E8_WORKERS.items()},
    **{f"EEightComputeScale{w}{e}": f"its {e.lower()}imum over the probes" for w in E8_WORKERS.values()
       for e in ("Min", "Max")},
    **{f"EEightCompressScale{w}": f"compression's slow-down with {n} workers sharing the cores, median (probes)"
       for n, w in E8_WORKERS.items()},
    "EEightImpliedMin": "per-message cost implied by the measured communication, minimum (ms)",
    "EEightImpliedMax": "its maximum (ms)",
    "EEightImpliedCells": "cells it was implied in",
    "EEightBucketKB": "the testbed shapers' token bucket the clock models, largest (KB)",
    "EEightBucketCells": "cells whose clock modelled the shapers' bucket",
    "EEightLossIdentical": "cells where sim and testbed losses were bit-identical",
    "EEightTTTCells": "cells that reached the target accuracy",
    "EEightTTTWorst": "worst |error| of the predicted time to accuracy (%)",
    "EEightDate": "date of the measurement",
    "EEightCommit": "commit of the measurement",
    "EEightHost": "the machine that measured it (words: host, a N-core CPU, -- a trailing comma closes the apposition)",
    "EEightEmulation": "how the links were emulated",
    # E8's language-model cells (runs/bench/e2e_lm.json)
    "EEightLmModel": "the language model of those cells",
    "EEightLmCells": "its compared cells",
    "EEightLmRepeats": "repeats per cell (each judged by its median repeat)",
    "EEightLmWithin": "of them within the tolerance",
    "EEightLmRates": "their link rates (Mbit/s, list)",
    "EEightLmWorkers": "their numbers of workers (list)",
    "EEightLmErrPerMethod": "signed step-time error per cell (list, %)",
    "EEightLmLoadMean": "the machine's mean 1-min load while they ran",
    "EEightLmLoadMax": "its highest 1-min load then",
    "EEightLmCores": "its cores",
    "EEightLmBusy": "whether the machine was busy then (words)",
    "EEightLmSyncMethods": "its methods whose workers meet only every H > 1 steps (list)",
    "EEightLmSyncSteps": "their steps between exchanges, H (list)",
    "EEightLmScalePerStep": "their compute slow-down with the slowest worker of every step, median",
    "EEightLmScaleOverSync": "their compute slow-down with the slowest worker's H-step sum (the clock's), median",
    "EEightLmSyncComputePred": "their compute per step as the calibrated clock predicts it, median (ms)",
    "EEightLmSyncComputeMeas": "their compute per step measured on the testbed (slowest worker), median (ms)",
    "EEightLmInSituMethods": "its per-layer compressed methods whose probes made the exchange in situ (list)",
    "EEightLmInSituMs": "their per-message cost in the exchange in situ, the clock's, median (ms)",
    "EEightLmReplayMs": "their per-message cost in the spin-gap replay of the same calls, median (ms)",
    "EEightLmImpliedMs": "their per-message cost implied by the testbed run's communication, median (ms)",
    "EEightLmInSituCompress": "their compression slow-down in the exchange in situ, the clock's, median",
    "EEightLmApartCompress": "their compression slow-down with no messages in between, median",
    "EEightLmInSituVsImplied": "whether the testbed runs' messages cost less or more than the probes' (word)",
    "EEightLmScheduling": "how the testbed's workers were scheduled (words: under SCHED_RR / the fair scheduler)",
    "EEightLmImpliedMin": "their per-message cost implied by the testbed runs, lowest over every repeat (ms)",
    "EEightLmImpliedMax": "its highest over every repeat (ms)",
    "EEightLmRtCells": "its compared cells with the workers under SCHED_RR (runs/bench/e2e_lm_realtime.json)",
    "EEightLmRtWithin": "of them within the tolerance",
    "EEightLmRtErrPerMethod": "signed step-time error per cell there (list, %)",
    "EEightLmRtInSituMs": "the per-layer cells' per-message cost in situ there, median (ms)",
    "EEightLmRtCostRatio": "the fair scheduler's per-message cost in situ over that",
    "EEightLmRtImpliedMin": "their per-message cost implied by the testbed runs there, lowest over every repeat (ms)",
    "EEightLmRtImpliedMax": "its highest over every repeat (ms)",
    # E9 communicate less often or less per step
    "ENineTarget": "target test accuracy (%)",
    "ENineSeeds": "seeds per configuration",
    "ENineWorkers": "the numbers of workers (words)",
    "ENineSmallN": "the number of workers the prose quotes",
    "ENineDenseAcc": "dense training's final test accuracy there (%)",
    "ENineRareBestAcc": "best final accuracy among the methods that communicate every H steps (%)",
    "ENineRareBestAccMethod": "its method",
    "ENineRareBytesMin": "dense bytes per step / those methods' bytes per step, smallest",
    "ENineRareBytesMax": "the same ratio, largest",
    **_per_link("ENine"),
    # E10 unequal and unsteady networks
    "ETenTarget": "target test accuracy (%)",
    "ETenSeeds": "seeds per configuration",
    "ETenWorkers": "the number of workers",
    "ETenMethods": "how many methods were compared",
    "ETenNetworks": "how many of the networks this profile ran (the even one included)",
    "ETenEvenFastest": "fastest method to the target on the even network",
    "ETenEvenFastestTtt": "its mean virtual time (duration)",
    "ETenEvenLinks": "the even network's links (words)",
    **_per_network("ETen", E10_MLP_NETWORKS),
    "ETenAutoChoice": "the collective(s) the cost model chose for top-k on the networks (words)",
    "ETenAutoMethod": "the method whose collective the cost model chooses",
    "ETenAutoFixed": "the same top-k without the choice",
    "ETenAutoAcc": "its final test accuracy on the even network (%)",
    "ETenAutoFixedAcc": "the fixed top-k's final test accuracy there (%)",
    "ETenAutoRunMin": "whole-run time with the choice / without, smallest over networks",
    "ETenAutoRunMax": "the same ratio, largest",
    "ETenAutoTttList": "time to target with the choice / without, per network (list)",
    "ETenCheckDate": "date of the check against the testbed",
    "ETenCheckHost": "the machine that measured it",
    "ETenCheckCells": "checked cells (network x method)",
    "ETenCheckScale": "the factor on every rate of the checked networks",
    "ETenCheckSteps": "the steps compared",
    "ETenCheckWorst": "largest signed step-time error among cells without a testbed stall (%)",
    "ETenCheckWorstWhere": "its network and method",
    "ETenCheckStallCells": "cells whose testbed run stalled (TCP time-outs)",
    "ETenCheckStalls": "those cells and their stalled steps (list)",
    "ETenCheckWithinTen": "cells within 10%",
    "ETenCheckList": "every cell's step-time error (list)",
    "ETenCheckDenseList": "dense cells' communication-time error per network (list)",
    "ETenCheckLoad": "the highest 1-minute load during the check",
    "ETenCheckSkipped": "networks the check could not run on the testbed (list)",
}
# The language model's E4, E9 and E10: the same summaries, judged by validation loss (nats/char, lower is better)
MACROS.update({
    "EFourLmTarget": "target validation loss (nats/char)",
    "EFourLmFocus": "bandwidth of the prose (Mbit/s)",
    "EFourLmSeeds": "seeds per method",
    "EFourLmDenseLoss": "dense training's final validation loss (nats/char)",
    "EFourLmTttDense": "dense's mean time to the target (duration; -- unless every seed reached it)",
    "EFourLmBest": "method first to the target (all seeds reached it)",
    "EFourLmBestTtt": "its mean virtual time to the target (duration)",
    "EFourLmBestSpeedup": "dense's time / its time",
    "EFourLmSigWorse": "methods with a significantly higher final validation loss than dense",
    "EFourLmSigWorseList": "those methods",
    "EFourLmNever": "methods no seed of which reached the target",
    "EFourLmPartial": "methods only some of whose seeds reached the target: how many, median time over all seeds",
    "EFourLmBestPerMbit": "the fastest method at every report bandwidth (list)",
    "EFourLmRankCorr": "Spearman's rank correlation of the methods' times to target, language model vs MLP",
    "EFourLmRankMethods": "how many methods that correlation is over",
    "EFourLmRankSame": "whether the fastest of those methods is the same on both workloads (words)",
    "EFourLmAnchorLoss": "gpt-small at nanoGPT's CPU recipe: final validation loss, mean (+- std) over seeds",
    "EFourLmAnchorSeeds": "its seeds",
    "EFourLmAnchorGap": "its mean minus nanoGPT's published 1.88 (signed, nats/char)",
    "EFourLmAnchorVerdict": "within or outside the tolerance (words, chosen by the report)",
    "ENineLmTarget": "target validation loss (nats/char)",
    "ENineLmSeeds": "seeds per configuration",
    "ENineLmWorkers": "the numbers of workers (words)",
    "ENineLmSmallN": "the number of workers the prose quotes",
    "ENineLmDenseLoss": "dense training's final validation loss there (nats/char)",
    "ENineLmRareBestLoss": "lowest final validation loss among the methods that communicate every H steps",
    "ENineLmRareBestLossMethod": "its method",
    "ENineLmRareBytesMin": "dense bytes per step / those methods' bytes per step, smallest",
    "ENineLmRareBytesMax": "the same ratio, largest",
    **_per_link("ENineLm"),
    **_per_method("e9lm", "Loss"),
    "ETenLmTarget": "target validation loss (nats/char)",
    "ETenLmSeeds": "seeds per configuration",
    "ETenLmWorkers": "the number of workers",
    "ETenLmMethods": "how many methods were compared",
    "ETenLmNetworks": "how many of the networks this profile ran (the even one included)",
    "ETenLmEvenFastest": "fastest method to the target on the even network",
    "ETenLmEvenFastestTtt": "its mean virtual time (duration)",
    "ETenLmEvenLinks": "the even network's links (words)",
    "ETenLmBudgetLeads": "per network, the method leading at its budget, its loss and margin (list)",
    **{f"ETenLmEven{k}": f"{what} (even network)" for k, what in _VS_DILOCO},
    "ETenLmLossBenchDate": "date of the measurement of TCP's loss recovery on the testbed (lowbw.bench.loss)",
    "ETenLmLossBenchHost": "the machine that measured it",
    "ETenLmLossBenchRate": "its links' rate",
    "ETenLmLossBenchCc": "the TCP congestion control its links ran",
    "ETenLmLossBenchList": "per loss and message size: the extra time measured and modelled (list)",
    "ETenLmLossBenchLoad": "the highest 1-minute load while it measured",
    "ETenLmLossTrainDate": "date of the training runs under loss on the testbed (lowbw.bench.loss_train)",
    "ETenLmLossTrainHost": "the machine that ran them",
    "ETenLmLossTrainSetting": "their workers, model and steps (words)",
    "ETenLmLossTrainList": "per method and loss: what loss added to comm per step, measured and charged (list)",
    "ETenLmLossTrainWorst": "the largest |charged / measured - 1| of those extras (%)",
    "ETenLmLossTrainSameLoss": "whether every method's final loss was the same at every loss rate (words)",
    "ETenLmLossTrainLoad": "the highest 1-minute load while they ran",
    **_per_network("ETenLm", E10_NETWORKS),
})
# E9 on the language model near convergence, each method tuned (lowbw.report.lmc)
MACROS.update({
    "ENineLmcTarget": "target validation loss: dense's final + 0.1, rounded up to 0.05 (nats/char)",
    "ENineLmcDenseLoss": "dense's final validation loss, mean over seeds (nats/char)",
    "ENineLmcSeeds": "seeds per method",
    "ENineLmcSteps": "steps per run",
    "ENineLmcMethods": "how many methods were compared",
    "ENineLmcWhere": "whether the runs were measured by this build or stored (words)",
    "ENineLmcCurveLoss": "dense's final validation loss in its long run (nats/char)",
    "ENineLmcCurveSteps": "that run's steps",
    "ENineLmcDenseGap": "dense's final loss minus the long run's (nats/char)",
    "ENineLmcSweepPoints": "points of the recorded sweep",
    "ENineLmcDenseSeedMin": "dense's lowest final validation loss over its seeds (nats/char)",
    "ENineLmcDenseSeedMax": "dense's highest final validation loss over its seeds (nats/char)",
    "ENineLmcDenseSweepLoss": "dense's final validation loss at its picked point of the sweep (seed 0; nats/char)",
    "ENineLmcWidestSpread": "the widest range of final validation loss over one method's seeds (nats/char)",
    "ENineLmcWidestSpreadMethod": "the method with that range",
    "ENineLmcSweepEdge": "methods whose one-knob best sat at the largest or smallest value their grid tried, with "
                         "the knob (list)",
    "ENineLmcJointPoints": "sweep points that combine each knob's best one-knob value (+joint)",
    "ENineLmcJointWorse": "methods whose combined point ended above one of their single points (list)",
    "ENineLmcJointWorseCount": "how many such methods",
    "ENineLmcHeldOutSeeds": "the seeds each inner-lr pick was checked on, which the sweep never ran (list)",
    "ENineLmcConfirmed": "methods whose pick and runner-up both ran on every held-out seed",
    "ENineLmcRepicked": "how many of them kept the runner-up's inner lr",
    "ENineLmcRepickedMethods": "those methods (list)",
    "ENineLmcDenseHeldPick": "dense's mean final loss on the held-out seeds at its seed-0 pick (nats/char)",
    "ENineLmcDenseHeldAlt": "the same at its runner-up inner lr (nats/char)",
    "ENineLmcDensePickLr": "dense's seed-0 pick of the inner lr",
    "ENineLmcDenseAltLr": "dense's runner-up inner lr",
    "ENineLmcDenseKeptLr": "dense's inner lr after the held-out check",
    "ENineLmcKeptAtEdge": "methods whose kept inner lr is the smallest or largest of all they tried, sweep and "
                          "held-out (list)",
    "ENineLmcExtended": "methods whose kept inner lr sat at the edge and ran a point beyond it on the held-out seeds",
    "ENineLmcExtendedKeptMethods": "those of them that kept an inner lr beyond the edge (list)",
    "ENineLmcTenSecond": "the method with the second-smallest censored median time to target at 10 Mbit/s",
    "ENineLmcTenSecondTtt": "its median time to target at 10 Mbit/s",
    "ENineLmcTenSecondArrived": "its seeds that reached the target at 10 Mbit/s (k of n)",
    "ENineLmcGbitSecond": "the method with the second-smallest censored median time to target at 1 Gbit/s",
    "ENineLmcGbitSecondTtt": "its median time to target at 1 Gbit/s",
    "ENineLmcGbitSecondArrived": "its seeds that reached the target at 1 Gbit/s (k of n)",
    "ENineLmcEagerGapSeeds": "seeds over which eager DiLoCo and DiLoCo are compared at both worker counts",
    "ENineLmcFewWorkers": "the smaller worker count of that comparison (e9_lmc_workers)",
    "ENineLmcEagerLoss": "eager DiLoCo's mean final val loss with the grid's workers, over those seeds",
    "ENineLmcDilocoLoss": "DiLoCo H=16's mean final val loss with the grid's workers, over those seeds",
    "ENineLmcEagerGap": "eager minus DiLoCo with the grid's workers (nats/char)",
    "ENineLmcEagerFewLoss": "eager DiLoCo's mean final val loss with fewer workers",
    "ENineLmcDilocoFewLoss": "DiLoCo H=16's mean final val loss with fewer workers",
    "ENineLmcEagerGapFew": "eager minus DiLoCo with fewer workers (nats/char)",
    "ENineLmcEagerGapVerdict": "whether the gap is narrower with fewer workers, in words",
    "ENineLmcUnseenSeeds": "the tuned seeds that no pick saw (neither the sweep's nor the held-out ones)",
    "ENineLmcPickOptimism": "median over methods of how much higher they end on those seeds than on the picking "
                            "ones (words: '0.02 nats/char higher')",
    "ENineLmcDenseWorstSeed": "the seed on which dense ends highest",
    "ENineLmcSameWorst": "methods that end highest on that seed too, of those with every seed (k of n)",
    "ENineLmcMuonSpread": "the range of Muon's final validation loss over its seeds (nats/char)",
    "ENineLmcDenseSpread": "the range of dense's (nats/char)",
    "ENineLmcNever": "methods no seed of which reached the target at 10 Mbit/s (list)",
    "ENineLmcEndsHigher": "methods whose final loss is significantly above dense's (Welch, p < 0.05; list)",
    **{f"ENineLmc{w}{k}": f"{what} ({link})" for w, link in (("Ten", "10 Mbit/s"), ("Gbit", "1 Gbit/s"))
       for k, what in (("Best", "method with the smallest median time to target over all seeds"),
                       ("BestTtt", "its median time (duration)"), ("BestArrived", "its arrivals (k of n)"),
                       ("BestBytes", "MB sent by all its workers until the target, median"),
                       ("BestEnds", "whether it ends as low as dense, higher but not significantly so (with "
                                    "p), or higher (words, chosen by the report)"),
                       ("BestFinal", "its final validation loss, mean (nats/char)"),
                       ("DenseTtt", "dense's median time to target (duration, or never)"),
                       ("Speedup", "dense's median time / the fastest method's"),
                       ("EqualTime", "the equal wall-clock budget: when the fastest whole run ends (duration)"),
                       ("EqualTimeBest", "the method with the lowest loss at that budget"),
                       ("EqualTimeLoss", "its loss there, mean over seeds (nats/char)"))},
})
# E11 how good is the advisor (leave-one-setting-out; lowbw.report.e11)
MACROS.update({
    "EElevenSettings": "held-out settings with a target the baseline reached",
    "EElevenSkipped": "settings without such a target (not evaluated)",
    "EElevenWorkloads": "the workloads of the evaluated settings (words)",
    "EElevenExperiments": "the experiments they come from (list)",
    "EElevenRegretMedian": "median regret of the advisor's pick (with its unit, e.g. 12\\,\\%; or never)",
    "EElevenRegretWorst": "worst regret (with its unit; or never)",
    "EElevenWorstWhere": "the setting of the worst regret",
    "EElevenWithinTen": "settings with a regret of at most 10%",
    "EElevenNeverReached": "settings whose pick did not reach the target there",
    "EElevenRhoMinMethods": "the fewest methods a rank correlation is quoted over (stats.MIN_CORRELATION_METHODS)",
    "EElevenRhoMedian": "median Spearman rank correlation of the advisor's order with the measured times, over the "
                        "settings where that many ranked methods reached the target (absent where none did)",
    "EElevenRhoSettings": "those settings (absent where none)",
    "EElevenRhoNone": "only where no setting has that many: the most ranked methods that reached the target in one",
    "EElevenVerdict": "which of the issue's three targets the advisor meets (words)",
    "EElevenFailures": "settings with a regret above 10% or an unreached pick: pick, best, regret (list)",
    "EElevenStrictRegretMedian": "median regret when every run of the workload and workers is held out "
                                 "(with its unit; or never)",
    "EElevenStrictRegretWorst": "worst such regret (with its unit; or never)",
    "EElevenStepRows": "dense and every-H fp32 method rows of the step-time comparison",
    "EElevenAdvisorStepErr": "the advisor's median |step-time error| against the measured step (%)",
    "EElevenAdvisorStepErrMax": "its largest (%)",
    "EElevenAnalyticStepErr": "the analytic form's median |step-time error| (%)",
    "EElevenAnalyticStepErrMax": "its largest (%)",
    "EElevenCharlesPoints": "grid points of the comparison with Charles et al.'s wall-clock model",
    "EElevenCharlesDilocoDev": "largest |advisor / Charles - 1| of a DiLoCo step (H > 1) on that grid (%)",
    "EElevenCharlesDpDev": "largest |advisor / Charles - 1| of a data-parallel step on that grid (%)",
    "EElevenCharlesSpeedupDev": "largest difference of DiLoCo's speed-up over data-parallel between the two (%)",
})
MACROS.update(E12_MACROS | {f"{p}NotRun": "why the experiment has no data in this profile" for p in PREFIX.values()})

# The System section's one-off engineering checks (not experiments: no NotRun), written by lowbw.report.system from
# paper/measured/system.json, where each is kept with its setting and the commit that measured it
SYSTEM_PREFIX = "Sys"
SYSTEM: dict[str, str] = {
    "SysPostIsendUs": "Python cost of posting one message through dist.isend (us, a range)",
    "SysPostDirectUs": "the same, posted to the process group directly (us, a range)",
    "SysLongQueueSpreadPct": "spread of repeated duplex transfers behind a queue of seconds at 10 Mbit/s (%)",
    "SysShortQueueOverModel": "worst 1 MB all-reduce (4 workers, pairwise rounds) behind a 100 ms queue / the model",
    "SysNoAckBandSlowerPct": "duplex transfers' largest slow-down against one-way ones without the ACK band (%)",
    "SysNoPeerQueuesMs": "1 MB ring all-reduce, 3 workers, 1 Gbit/s, without per-peer queues (ms)",
    "SysPeerQueuesMs": "the same with them (ms)",
    "SysPeerQueuesGlooMs": "gloo's all-reduce there (ms)",
    "SysSpuriousRetransmits": "spurious fast retransmits with every short frame first",
    "SysSpuriousCalls": "in how many 1 MB ring all-reduces",
    "SysBbrFastS": "100 MB all-gather all-reduce under BBR, the fast mode (s)",
    "SysBbrSlowS": "the slow mode (s)",
    "SysCubicS": "the same under CUBIC (s, a range)",
    "SysBurstGainPct": "how much faster than m*beta a 1 MB transfer at 1 Gbit/s runs on an idle link (%)",
    "SysFairDelayedPct": "share of 1 MB all-reduces delayed under the fair scheduler (%, a range)",
    "SysFairExtraMs": "their extra time (ms, a range)",
    "SysUndisturbedMs": "the undisturbed time (ms, a range)",
}
MACROS.update(SYSTEM)

# What the whole build read (lowbw.report.build; not an experiment's: no NotRun)
BUILD_PREFIX = "Build"
BUILD: dict[str, str] = {
    "BuildStores": "the measurement stores kept in the repository whose contents entered this build's numbers "
                   "(words, a list: lowbw.report.stores)",
}
MACROS.update(BUILD)
# The abstract's, introduction's, discussion's and conclusion's result sentences, chosen by the numbers
MACROS.update({name: f"1 where the numbers bear out that {c.says}, 0 where not; absent without its evidence"
               for name, c in SENTENCES.items()})


# An experiment's axes that have their own subsection and NotRun macro (written when only that axis is absent):
# when the whole experiment is absent, the report writes theirs too, so that each subsection says it was not run.
AXIS_NOT_RUN = {"e1": ("EOneLatNotRun", "EOneExchNotRun")}


def not_run_macro(key: str) -> str:
    return f"{PREFIX[key]}NotRun"


def not_run_macros(key: str) -> tuple[str, ...]:
    """Every NotRun macro of experiment ``key`` absent as a whole: its own and its axes' (``AXIS_NOT_RUN``)."""
    return (not_run_macro(key), *AXIS_NOT_RUN.get(key, ()))


def word(mapping: dict, value, what: str) -> str:
    """``mapping[value]``, or a one-line error naming the value and the catalogue entry to extend."""
    if value not in mapping:
        raise ValueError(f"{what} {value!r} has no macro word; add it to lowbw.report.catalog "
                         f"(known: {sorted(mapping)})")
    return mapping[value]


# What the prose says about a number, where it types the direction: macro -> (the bound the number must respect,
# the prose's words). A regenerated number on the wrong side fails the report (and so the paper rule), so the
# paper never prints a sentence its number contradicts; rewrite the sentence or let the report choose the word.
CLAIMS: dict[str, tuple[float, str]] = {
    "EFourBestSpeedup": (1.0, "times faster than dense"),
    "ENineRareBytesMin": (1.0, "times fewer bytes per step than dense"),
    "ENineLmRareBytesMin": (1.0, "times fewer bytes per step than dense"),
    "EEightComputeScaleFour": (1.0, "times slower than alone"),
    **{f"{p}{E10_NETWORKS[n]}DenseRatio": (1.0, "dense training is ... times slower")
       for p, nets in (("ETen", E10_MLP_NETWORKS), ("ETenLm", E10_NETWORKS)) for n in nets if n != "churn"},
    **{f"ETenLm{E10_NETWORKS[n]}DensePpl": (0.0, "dense's perplexity ... higher than without")
       for n in E10_NETWORKS if n.startswith("loss")},
}


def check_numbers(key: str, numbers: dict[str, str]) -> None:
    """Every name is in the catalogue and carries experiment ``key``'s prefix, and every number whose direction
    the prose states (``CLAIMS``: at least the bound) respects it."""
    bad = sorted(n for n in numbers if n not in MACROS or not n.startswith(PREFIX[key]))
    if bad:
        raise ValueError(f"experiment {key} writes macros outside lowbw.report.catalog: {bad}")
    for name, (bound, words) in CLAIMS.items():
        v = value(numbers[name]) if name in numbers else None
        if v is not None and v < bound:
            raise ValueError(f"{name} = {numbers[name]}, but the prose says '{words}' (needs >= {bound:g}): "
                             f"rewrite its sentence in paper/sections or let the report choose the word")
