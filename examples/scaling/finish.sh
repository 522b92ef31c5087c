#!/bin/sh
# After examples/scaling/campaign.py (or part of it) has run: what to commit, in order.
#   1. the picks the campaign made against the values config/scaling.yaml writes (edit the config where they differ,
#      so that `snakemake --profile config/profiles/scaling` reruns the same runs);
#   2. E12 rebuilt from the store (paper/measured/scaling, every run the campaign finished) and its size-trend
#      points copied to the advisor's shipped table (lowbw/advise/size_trend.csv);
#   3. the git command that commits them.
# Run from the repository root with PYTHONPATH=$PWD (and LOWBW_DATA_MIRROR where the data is mirrored).
set -e
PY=${PYTHON:-python}
$PY examples/scaling/campaign.py --check || echo "^ write these picks into config/scaling.yaml before committing"
# the store alone, what is committed (RUNS=runs to let unstored runs under runs/ take part)
$PY -m lowbw report --only e12 --runs "${RUNS:-paper/measured/scaling/no-runs-dir}"
cp paper/generated/stats/e12_trends.csv lowbw/advise/size_trend.csv
grep -c . lowbw/advise/size_trend.csv | sed 's/^/size_trend.csv lines (with its provenance comments): /'
echo "git add paper/measured/scaling lowbw/advise/size_trend.csv config/scaling.yaml && git commit"
