# lowbw workflow: the experiment grid -> papermill notebooks -> runs/ -> paper/generated -> paper.pdf
#
#   snakemake --cores 2                          quick profile (config/config.yaml), 2-core CPU
#   snakemake -n                                 the plan
#   snakemake --profile config/profiles/full     GPU-scale grid (config/full.yaml)
#   snakemake --profile config/profiles/slurm    the same on a SLURM cluster (executor plugin)
#
# Every run writes summary.json last (atomically), so an interrupted job is simply rerun.
import json
import os
import shlex

from lowbw.workflow.grid import decode, run_config
from lowbw.workflow.gridcache import checked_grid
from lowbw.workflow.progress import expect

# config/config.yaml (quick) unless --configfile names another grid; that one then *replaces* it rather than
# being merged into it (a merged grid would keep the quick profile's other experiments).
if not workflow.overwrite_configfiles:
    configfile: "config/config.yaml"


def check_config(cfg):
    """The config schema, then every run's RunConfig (cross-key rules, traces, clock calibration) before any job.
    Imported here: jsonschema and torch take seconds to import, and checked_grid runs this only when the config,
    a file it names or lowbw's code changed since the last check (lowbw.workflow.gridcache)."""
    from snakemake.utils import validate
    from lowbw.workflow.grid import validate_grid
    from lowbw.net.units import check_config_tree

    check_config_tree(cfg)  # a misread rate or delay: one line naming its path, not jsonschema's long message
    validate(cfg, "config/schema.yaml")
    validate_grid(cfg)


# The benchmarks' busy verdict counts this workflow's process tree (Snakemake, papermill, its kernels, their
# workers) as their own work, not contention (lowbw.measure.conditions); every job inherits the variable.
os.environ["LOWBW_WORKFLOW_PID"] = str(os.getpid())
RUN_CONFIGS = checked_grid(config, check_config, files=["config/schema.yaml"])  # {run dir: resolved RunConfig}
RUNS = list(RUN_CONFIGS)
# the experiments of the training runs still to do, for the progress line's estimate (make: snakemake --logger lowbw)
expect("train", [d.split("/")[1] for d in RUNS if not os.path.exists(f"{d}/summary.json")])
# The host's measurements (lowbw.workflow.hoststore): those the profile lists under bench: measure are made when their
# file is missing; the others are read from runs/bench/ where a file is there (kept between runs, or measured by
# hand), else from the repository's store (bench: stored, paper/measured/host: measured once on the machine its
# index names), else reported as not run. So a fresh clone's default profile prints E1 and E8 without spending
# their ~23 and ~50 minutes; `make measure` makes every one on this machine (the paper then says so).
HOST_RULES = ("collectives", "collectives_latency", "compressors", "models", "e2e", "e2e_lm")  # made by a rule
# default: every one, E8's LM cells only where the profile sizes them (bench: e2e_lm; its command's default grid is
# the full one)
MEASURE = config["bench"].get("measure", [n for n in HOST_RULES if n != "e2e_lm" or "e2e_lm" in config["bench"]])
STORED = config["bench"].get("stored")


def bench_input(name):
    """runs/bench/<name>.json where this profile measures it or it is there, else the stored file, else None."""
    f = f"runs/bench/{name}.json"
    if name in MEASURE or os.path.exists(f):
        return f
    s = f"{STORED}/{name}.json" if STORED else None
    return s if s and os.path.exists(s) else None


# E8's cells under SCHED_RR (e2e_lm_realtime.json) and E1's packed exchange (exchange*.json, `bench exchange`) are
# measured by hand only (README)
BENCH = [f for f in map(bench_input, HOST_RULES + ("e2e_lm_realtime", "exchange", "exchange_realtime")) if f]
# the language model's E4, E9, E10, E9 near convergence (the lm_evidence profile's runs, or those stored), and
# E12 (the scaling profile's runs, or those stored)
EXPERIMENTS = [f"e{i}" for i in range(1, 11)] + ["e4lm", "e9lm", "e10lm", "e9lmc", "e12"]
GENERATED = (
    ["paper/generated/numbers.tex", "paper/generated/setup.tex", "paper/generated/tab_table6.tex"]
    + [f"paper/generated/{kind}_{e}.{ext}" for e in EXPERIMENTS
       for kind, ext in (("tab", "tex"), ("fig", "pdf"))]
)
THREADS = config.get("threads_per_job", 1)
# What every job asks the scheduler for (the SLURM executor plugin turns them into sbatch --cpus-per-task,
# --mem, -t and --gpus; locally `--resources` can cap them): threads, mem_mb (MB of RAM), runtime (minutes
# of wall time) and, for training, gpu (GPUs per run, config gpus_per_run). Two sizes: the full profile's
# GPU-scale runs and the CPU-scale quick/tiny profiles, whose jobs take seconds to minutes. A full training
# run is 64k steps of 8 simulated workers on one GPU: at the H100's measured worst, 0.16 s per worker-step
# (per-layer compressors; dense 0.009 s, README "On a GPU"), 64000 * 8 * 0.16 s = 23 h, hence 24 h; a run
# stopped at its limit resumes from its checkpoint (every 2000 steps) when the workflow is run again.
FULL = config["profile"] == "full"
# The GPU profile (config/profiles/gpu) ends by keeping its runs in the repository (paper/measured/gpu), where
# the CPU profiles' report finds them; the paper is rebuilt by the quick profile, with them included.
GPU = config["profile"] == "gpu"
# The scaling profile (config/profiles/scaling, issue 44) keeps its CPU runs the same way, in paper/measured/scaling
SCALING = config["profile"] == "scaling"
STORE = "paper/measured/scaling" if SCALING else "paper/measured/gpu"
# Measuring benchmarks run alone: a timing taken beside a training job measures the other job too (E8's cells
# were off by up to 126% at load 6-8 on 2 cores). Every training job holds one unit of the resource `machine`
# and every measuring benchmark all of it, so that neither starts while the other runs, whatever --cores (or
# --jobs) is. The capacity is registered here unless `--resources machine=N` names one (the mutex pattern
# Snakemake uses itself); it only has to exceed the training jobs that may run at once.
MACHINE = 100_000
if "machine" not in workflow.global_resources:
    workflow.register_resource("machine", MACHINE)


wildcard_constraints:
    exp=r"e[0-9]+_[a-z0-9_]+",
    params=r"[A-Za-z0-9_.+\-]+~[A-Za-z0-9_.+\-~/]+",


rule all:
    input:
        f"{STORE}/index.json" if GPU or SCALING else "paper/build/paper.pdf",
        [] if GPU or SCALING else "paper/generated/stats/efficiency.csv",
        [] if GPU or SCALING else "paper/build/compare.txt",


rule runs:
    """Only the measurements (no report, no paper)."""
    input:
        RUNS and [f"{d}/summary.json" for d in RUNS],
        BENCH,


rule train:
    """One training run: notebooks/train.ipynb executed by papermill into the run directory. A run resumes or
    redoes its work when run again, so a failed attempt is retried: once in a full test run a papermill kernel
    never answered its start ("Kernel didn't respond in 120 seconds", two kernels starting together)."""
    retries: 2
    output:
        "runs/{exp}/{params}/summary.json",
    log:
        "runs/{exp}/{params}/train.log",
    threads: THREADS
    resources:
        gpu=config.get("gpus_per_run", 0),
        mem_mb=16000 if FULL else 2000,
        runtime=1440 if FULL else 60,
        machine=1,
    params:
        cfg=lambda w: shlex.quote(json.dumps(RUN_CONFIGS.get(f"runs/{w.exp}/{w.params}")
                                             or run_config(config, w.exp, decode(w.params)), sort_keys=True)),
        out=lambda w: f"runs/{w.exp}/{w.params}",
    conda:
        "environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} papermill --log-output --start-timeout 120 -k python3 notebooks/train.ipynb {params.out}/train.ipynb "
        "-p config_json {params.cfg} -p out {params.out} -p threads {threads} > {log} 2>&1"


rule gpu_store:
    """GPU profile: every run, thinned to a small text form with its GPU, versions, commit and date, into the
    store the report reads (python -m lowbw store; refuses runs not measured on CUDA)."""
    input:
        [f"{d}/summary.json" for d in RUNS],
    output:
        f"{STORE}/index.json",
    log:
        "runs/report/gpu_store.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        dirs=" ".join(RUNS),
    conda:
        "environment.yml"
    shell:
        "python -m lowbw store add {params.dirs} --to " + STORE + (" --cpu" if SCALING else "") + " > {log} 2>&1"


rule bench_collectives:
    """E1: every collective on rate-limited links (netns + tc when root, else labelled loopback emulation)."""
    output:
        "runs/bench/collectives.json",
    log:
        "runs/bench/collectives.log",
    threads: 1
    resources:
        mem_mb=4000 if FULL else 2000,
        runtime=240 if FULL else 30,
        machine=MACHINE,
    params:
        cfg=shlex.quote(json.dumps(config["bench"]["collectives"], sort_keys=True)),
    conda:
        "environment.yml"
    shell:
        "papermill --log-output --start-timeout 120 -k python3 notebooks/collectives.ipynb runs/bench/collectives.ipynb "
        "-p config_json {params.cfg} -p out {output} > {log} 2>&1"


rule bench_collectives_latency:
    """E1's latency axis: every collective at several one-way link delays (the userspace link emulator where the
    kernel has no netem); testbeds it cannot carry are skipped before any starts and listed in the result."""
    output:
        "runs/bench/collectives_latency.json",
    log:
        "runs/bench/collectives_latency.log",
    threads: 1
    resources:
        mem_mb=4000 if FULL else 2000,
        runtime=240 if FULL else 45,
        machine=MACHINE,
    params:
        cfg=shlex.quote(json.dumps(config["bench"]["collectives_latency"], sort_keys=True)),
    conda:
        "environment.yml"
    shell:
        "papermill --log-output --start-timeout 120 -k python3 notebooks/collectives.ipynb "
        "runs/bench/collectives_latency.ipynb -p config_json {params.cfg} -p out {output} > {log} 2>&1"


rule bench_compressors:
    """E2: ratio, error, bias, throughput of every compressor, side by side with bitsandbytes and torch hooks."""
    output:
        "runs/bench/compressors.json",
    log:
        "runs/bench/compressors.log",
    threads: 2
    resources:
        mem_mb=8000 if FULL else 2000,
        runtime=120 if FULL else 30,
        machine=MACHINE,
    params:
        cfg=shlex.quote(json.dumps(config["bench"]["compressors"], sort_keys=True)),
    conda:
        "environment.yml"
    shell:
        "papermill --log-output --start-timeout 120 -k python3 notebooks/compression.ipynb runs/bench/compressors.ipynb "
        "-p config_json {params.cfg} -p out {output} > {log} 2>&1"


rule bench_models:
    """E3: per-model step cost on this machine and gradient bytes, for the minimum training time."""
    output:
        "runs/bench/models.json",
    log:
        "runs/bench/models.log",
    threads: 2
    resources:
        mem_mb=16000 if FULL else 3000,
        runtime=120 if FULL else 30,
        machine=MACHINE,
    params:
        args=" ".join(f"--{k.replace('_', '-')} " + (" ".join(map(str, v)) if isinstance(v, list) else str(v))
                      for k, v in config["bench"].get("models", {}).items()),
    conda:
        "environment.yml"
    shell:
        "python -m lowbw.bench.models {params.args} --out {output} > {log} 2>&1"


def e2e_args(name):
    """`bench e2e`'s arguments from the profile's bench: <name> block (rates in Mbit/s, as the config writes them)."""
    return " ".join(
        f"--{k.replace('_', '-')} " + (",".join(map(str, v)) if k == "methods" else
                                       " ".join(f"{r}mbit" for r in v) if k == "rates" else
                                       " ".join(map(str, v)) if isinstance(v, list) else str(v))
        for k, v in config["bench"].get(name, {}).items())


rule bench_e2e:
    """E8: the same training on sim (virtual clock) and on procs over the testbed's shaped links, per cell.
    Like E1's, an existing runs/bench/e2e.json is kept (the full grid is `python -m lowbw bench e2e`)."""
    output:
        "runs/bench/e2e.json",
    log:
        "runs/bench/e2e.log",
    threads: 2
    resources:
        mem_mb=8000 if FULL else 2000,
        runtime=720 if FULL else 60,
        machine=MACHINE,
    params:
        args=lambda w: e2e_args("e2e"),
    conda:
        "environment.yml"
    shell:
        "python -m lowbw bench e2e {params.args} --runs-dir runs/bench/e2e --out {output} > {log} 2>&1"


rule bench_e2e_lm:
    """E8's language-model cells: the same check on gpt-small's per-layer exchange (bench: e2e_lm's grid)."""
    output:
        "runs/bench/e2e_lm.json",
    log:
        "runs/bench/e2e_lm.log",
    threads: 2
    resources:
        mem_mb=8000 if FULL else 3000,
        runtime=720 if FULL else 30,
        machine=MACHINE,
    params:
        args=lambda w: e2e_args("e2e_lm"),
    conda:
        "environment.yml"
    shell:
        "python -m lowbw bench e2e {params.args} --runs-dir runs/bench/e2e_lm --out {output} > {log} 2>&1"


rule efficiency:
    """The advisor's efficiency table (lowbw advise): every method's measured steps to the target relative to
    dense training, per workload and workers, from the training runs and the converged-regime LM runs kept in
    paper/measured/lm (lowbw.advise.efficiency.STORES; provenance in its # lines)."""
    input:
        [f"{d}/summary.json" for d in RUNS],
        glob_wildcards("paper/measured/lm/{path}/summary.json").path
        and expand("paper/measured/lm/{path}/summary.json", path=glob_wildcards("paper/measured/lm/{path}/summary.json").path),
    output:
        "paper/generated/stats/efficiency.csv",
    log:
        "runs/report/efficiency.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    shell:
        "python -m lowbw advise --build-efficiency runs {output} > {log} 2>&1"


rule report:
    """Collate every run and benchmark into tables, figures and numbers.tex for the paper (the findings' prose
    is paper/sections/results.tex, quoting numbers.tex)."""
    input:
        runs=[f"{d}/summary.json" for d in RUNS],
        bench=BENCH,
        stored=glob_wildcards(f"{STORE}/{{path}}/summary.json").path
        and expand(f"{STORE}/{{path}}/summary.json", path=glob_wildcards(f"{STORE}/{{path}}/summary.json").path),
        system="paper/measured/system.json",  # the System section's recorded checks (lowbw.report.system)
        # the lm_evidence profile's runs kept in the repository (lowbw.report.lmc reads them where runs/ lacks them)
        lmc=glob_wildcards("paper/measured/lm/{path}/summary.json").path
        and expand("paper/measured/lm/{path}/summary.json", path=glob_wildcards("paper/measured/lm/{path}/summary.json").path),
        scaling=[f for f in ["paper/measured/scaling/index.json"] if os.path.exists(f)],  # E12's stored runs
    output:
        GENERATED,
    log:
        "runs/report/report.log",
    threads: 1
    resources:
        mem_mb=4000 if FULL else 2000,
        runtime=60 if FULL else 30,
    params:
        cfg=shlex.quote(json.dumps(config, sort_keys=True)),
    conda:
        "environment.yml"
    shell:
        "papermill --log-output --start-timeout 120 -k python3 notebooks/report.ipynb runs/report/report.ipynb "
        "-p config_json {params.cfg} -p runs_dir runs -p out paper/generated > {log} 2>&1"


rule paper:
    """latexmk: undefined references or missing figures fail the build (paper/latexmkrc)."""
    input:
        GENERATED,
        "paper/paper.tex",
        "paper/refs.bib",
        "paper/latexmkrc",
        sections=glob_wildcards("paper/sections/{name}.tex").name and expand(
            "paper/sections/{name}.tex", name=glob_wildcards("paper/sections/{name}.tex").name),
    output:
        "paper/build/paper.pdf",
    log:
        "runs/report/paper.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=15,
    conda:
        "environment.yml"
    shell:
        "cd paper && latexmk -pdf -interaction=nonstopmode -halt-on-error paper.tex > ../{log} 2>&1"


rule compare_reference:
    """The built paper against the reference build kept in the repository (paper/reference/paper.pdf, kept with
    its commit, date, profile and machine in BUILD.json by `make reference`): pages, and which sentences'
    generated numbers changed (pdftotext; lowbw.workflow.reference). It reports; moved numbers never fail the build."""
    input:
        pdf="paper/build/paper.pdf",
        reference=[p for p in ("paper/reference/paper.pdf", "paper/reference/BUILD.json") if os.path.exists(p)],
    output:
        "paper/build/compare.txt",
    log:
        "runs/report/compare.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "python -m lowbw.workflow.reference compare paper/reference/paper.pdf {input.pdf} --out {output} > {log} 2>&1"
