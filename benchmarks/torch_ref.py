"""The AP-DRL MLP benchmarks' training steps written in PyTorch (CPU), for side-by-side timing with our
emulation (benchmarks/bench_mixed.py). Same networks, batch, loss and optimizer as the designs:
DQN (CleanRL dqn.py), A2C (Stable-Baselines3), DDPG (CleanRL ddpg_continuous_action.py).

PyTorch is optional (``pip install torch``); ``available()`` says whether it imports.
"""

from __future__ import annotations

import copy
import time


def available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _mlp(sizes, act, out_act=None):
    import torch.nn as nn

    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    if out_act:
        layers.append(out_act())
    return nn.Sequential(*layers)


def dqn_step(obs=4, hidden=(64, 64), n_act=2, batch=128, lr=2.5e-4, gamma=0.99):
    """One CleanRL DQN gradient step as a closure."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    q = _mlp((obs, *hidden, n_act), nn.ReLU)
    qt = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    s, s2 = torch.randn(batch, obs, generator=g) * 0.5, torch.randn(batch, obs, generator=g) * 0.5
    a = torch.randint(0, n_act, (batch,), generator=g)
    r, d = torch.ones(batch), torch.zeros(batch)

    def step():
        with torch.no_grad():
            target = r + gamma * qt(s2).max(dim=1).values * (1 - d)
        old = q(s).gather(1, a[:, None]).squeeze(1)
        loss = F.mse_loss(target, old)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def a2c_step(obs=4, hidden=(64, 64), act_dim=1, batch=40, lr=7e-4):
    """One Stable-Baselines3 A2C update (separate tanh actor / critic, RMSprop, grad clip 0.5)."""
    import torch
    import torch.nn as nn

    pi, v = _mlp((obs, *hidden, act_dim), nn.Tanh), _mlp((obs, *hidden, 1), nn.Tanh)
    log_std = nn.Parameter(torch.zeros(act_dim))
    params = [*pi.parameters(), *v.parameters(), log_std]
    opt = torch.optim.RMSprop(params, lr=lr, alpha=0.99, eps=1e-5)
    g = torch.Generator().manual_seed(0)
    s, act = torch.randn(batch, obs, generator=g), torch.randn(batch, act_dim, generator=g)
    ret, adv = torch.randn(batch, generator=g), torch.randn(batch, generator=g)

    def step():
        dist = torch.distributions.Normal(pi(s), log_std.exp())
        logp = dist.log_prob(act).sum(1)
        loss = -(adv * logp).mean() + 0.5 * ((ret - v(s).squeeze(1)) ** 2).mean() - 0.0 * dist.entropy().sum(1).mean()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
    return step


def ddpg_step(obs=8, act_dim=2, hidden=(400, 300), batch=256, lr=3e-4, gamma=0.99, tau=0.005, policy_frequency=2):
    """One CleanRL DDPG iteration: the critic step, and the actor update and Polyak step every
    `policy_frequency` calls (CleanRL's 2; the AP-DRL designs' RL Zoo configs 1)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    actor = _mlp((obs, *hidden, act_dim), nn.ReLU, nn.Tanh)
    critic = _mlp((obs + act_dim, *hidden, 1), nn.ReLU)
    actor_t, critic_t = copy.deepcopy(actor), copy.deepcopy(critic)
    qopt, aopt = torch.optim.Adam(critic.parameters(), lr=lr), torch.optim.Adam(actor.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    s, s2 = torch.randn(batch, obs, generator=g), torch.randn(batch, obs, generator=g)
    a, r, d = torch.rand(batch, act_dim, generator=g) * 2 - 1, torch.randn(batch, generator=g), torch.zeros(batch)
    state = {"n": 0}

    def step():
        with torch.no_grad():
            nq = critic_t(torch.cat([s2, actor_t(s2)], 1)).view(-1)
            y = r + (1 - d) * gamma * nq
        qloss = F.mse_loss(critic(torch.cat([s, a], 1)).view(-1), y)
        qopt.zero_grad()
        qloss.backward()
        qopt.step()
        state["n"] += 1
        if state["n"] % policy_frequency == 0:
            aloss = -critic(torch.cat([s, actor(s)], 1)).mean()
            aopt.zero_grad()
            aloss.backward()
            aopt.step()
            with torch.no_grad():
                for net, tgt in ((actor, actor_t), (critic, critic_t)):
                    for p, tp in zip(net.parameters(), tgt.parameters()):
                        tp.mul_(1 - tau).add_(tau * p)
    return step


def seconds_per_step(step, repeats: int = 20, rounds: int = 3, threads: int = 1) -> float:
    """Best-of-`rounds` mean seconds of `step()` with `threads` intra-op threads."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        step()
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(repeats):
                step()
            best = min(best, (time.perf_counter() - t0) / repeats)
        return best
    finally:
        torch.set_num_threads(old)


REFERENCES = {  # design -> step factory with its Table III network and the design's batch
    "apdrl-dqn-cartpole": lambda: dqn_step(4, (64, 64), 2, 128),
    "apdrl-a2c-invpendulum": lambda: a2c_step(4, (64, 64), 1, 40),
    "apdrl-ddpg-lunarcont": lambda: ddpg_step(8, 2, (400, 300), 256),
    "apdrl-ddpg-mntncarcont": lambda: ddpg_step(2, 1, (400, 300), 256),
}
