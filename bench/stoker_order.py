"""stoker's sample orders, written from their description in docs/sampler.md (not from the C++):
the random permutation and the quasi-random order. The tests check the C++ against these; the PyTorch
baseline uses them to give PyTorch the same order."""

M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def permutation(n, seed, epoch):
    p, state = list(range(n)), mix(mix(seed) ^ epoch)
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & M64
        j = (mix(state) * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p


def quasi_random(n, group, seed, epoch, window=4):
    t = mix(seed ^ 0x7175617369726E64)
    groups = permutation((n + group - 1) // group, t, epoch)
    out = []
    for w, first in enumerate(range(0, len(groups), window)):
        members = [i for g in groups[first:first + window] for i in range(g * group, min((g + 1) * group, n))]
        out += [members[k] for k in permutation(len(members), mix(t ^ (w + 1)), epoch)]
    return out
