# Round 3 (prepared in the twenty-third session, not run): the twenty-second session's round 5,
# unchanged (the cluster form's timing with a same-run baseline; applies
# bench/studies/patches/triton_clusters.patch to the device's copy of the tree, so run it last).
bash bench/results/2026-12-04-s22/scripts/r5.sh
