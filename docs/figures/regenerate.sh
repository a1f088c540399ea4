#!/usr/bin/env sh
# Remakes every figure in docs/figures/ from the experiment that draws it (run from the repository
# root). Each experiment resumes its --out folder, so a finished one only redraws its figures.
# Budget: hours on 2 cores for folders that do not exist yet (see each seed's page).
set -eu
rlhls experiment heppo-table3 --steps 120000 --seeds 3 --out runs/heppo-table3
cp runs/heppo-table3/comparison.png docs/figures/heppo-table3.png
rlhls experiment heppo-bits --steps 50000 --seeds 3 --out runs/heppo-bits
cp runs/heppo-bits/comparison.png docs/figures/heppo-bits.png
rlhls experiment cpp-fig4 --param samples=50000 --jobs 2 --out runs/cpp-fig4-full
cp runs/cpp-fig4-full/fig4.png docs/figures/cpp-fig4-50k.png
rlhls experiment apdrl-table3 --design apdrl-dqn-cartpole --full --seeds 8 --out runs/t3-cartpole
cp runs/t3-cartpole/fig11.png docs/figures/apdrl-cartpole-500k.png
rlhls experiment apdrl-table3 --design apdrl-a2c-invpendulum --steps 400000 --seeds 20 --out runs/t3-a2c
cp runs/t3-a2c/fig11.png docs/figures/apdrl-a2c-400k.png
rlhls experiment apdrl-table3 --design apdrl-ddpg-lunarcont --design apdrl-ddpg-mntncarcont --full --steps 100000 --seeds 3 --jobs 2 --out runs/apdrl-ddpg-100k
cp runs/apdrl-ddpg-100k/fig11.png docs/figures/apdrl-ddpg-100k.png
rlhls experiment apdrl-speedup --out runs/apdrl-speedup
cp runs/apdrl-speedup/fig4.png docs/figures/apdrl-fig4.png
cp runs/apdrl-speedup/fig6.png docs/figures/apdrl-fig6.png
cp runs/apdrl-speedup/fig12.png docs/figures/apdrl-fig12.png
cp runs/apdrl-speedup/fig13.png docs/figures/apdrl-fig13.png
rlhls experiment traffic-energy --out runs/traffic-energy
cp runs/traffic-energy/energy.png docs/figures/traffic-energy.png
