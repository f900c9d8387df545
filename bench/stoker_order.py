"""stoker's sample orders, copied from their description in docs/sampler.md (not from the C++): the
random permutation (a keyed Feistel bijection computed per position) and the quasi-random order.
The tests check the C++ against these; the PyTorch baseline uses them to give PyTorch the same
order."""

import math

M64 = M = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def feistel(n, seed, epoch):
    """p(i) for the permutation of [0, n) of (seed, epoch)."""
    h = max(4, ((n - 1).bit_length() + 1) // 2) if n > 1 else 4
    mask, state, keys = (1 << h) - 1, mix(mix(seed) ^ epoch), []
    for _ in range(6):
        state = (state + 0x9E3779B97F4A7C15) & M
        keys.append(mix(state))

    def encrypt(x):
        left, right = x >> h, x & mask
        for k in keys:
            left, right = right, left ^ (mix(right ^ k) & mask)
        return (left << h) | right

    def p(i):
        y = encrypt(i)
        while y >= n:
            y = encrypt(y)
        return y

    return p


def permutation(n, seed, epoch):
    p = feistel(n, seed, epoch)
    return [p(i) for i in range(n)]


def inverse(n, seed, epoch, y):  # p⁻¹(y), as the C++ computes it: rounds backwards, walking
    h = max(4, ((n - 1).bit_length() + 1) // 2) if n > 1 else 4
    mask, state, keys = (1 << h) - 1, mix(mix(seed) ^ epoch), []
    for _ in range(6):
        state = (state + 0x9E3779B97F4A7C15) & M
        keys.append(mix(state))

    def decrypt(x):
        left, right = x >> h, x & mask
        for k in reversed(keys):
            left, right = right ^ (mix(left ^ k) & mask), left
        return (left << h) | right

    x = decrypt(y)
    while x >= n:
        x = decrypt(x)
    return x


def quasi_random(n, group, seed, epoch, window=4):
    t, m = mix(seed ^ 0x7175617369726E64), (n + group - 1) // group
    gp, size = feistel(m, t, epoch), lambda g: min(group, n - g * group)
    short, d, full = inverse(m, t, epoch, m - 1) // window, group - size(m - 1), window * group

    def at(i):
        w = i // full if i < (short + 1) * full - d else (i + d) // full
        start = w * full - (d if w > short else 0)
        members = [gp(j) for j in range(w * window, min(w * window + window, m))]
        q = feistel(sum(size(g) for g in members), mix(t ^ (w + 1)), epoch)(i - start)
        for g in members:
            if q < size(g):
                return g * group + q
            q -= size(g)

    return [at(i) for i in range(n)]


def quasi_random_shards(shards, group, seed, epoch, window=4, interleave=8):
    """The quasi-random order of a shard set of shards[s] samples each (docs/sampler.md), listed
    block by block; for one shard it is quasi_random(shards[0], ...)."""
    t = mix(seed ^ 0x7175617369726E64)
    first = [sum(shards[:s]) for s in range(len(shards))]
    sp = feistel(len(shards), mix(t ^ 0x736861726473), epoch)
    order, windows_before = [], 0
    for c, b in enumerate(range(0, len(shards), interleave)):
        groups = []  # (first sample, size), the block's shards one after the other
        for j in range(b, min(b + interleave, len(shards))):
            s = sp(j)
            groups += [(first[s] + k, min(group, shards[s] - k)) for k in range(0, shards[s], group)]
        gp = feistel(len(groups), t ^ ((c * 0x9E3779B97F4A7C15) & M), epoch)
        shuffled = [groups[gp(j)] for j in range(len(groups))]
        for w in range(0, len(shuffled), window):
            listed = [i for start, size in shuffled[w : w + window] for i in range(start, start + size)]
            q = feistel(len(listed), mix(t ^ (windows_before + w // window + 1)), epoch)
            order += [listed[q(k)] for k in range(len(listed))]
        windows_before += (len(groups) + window - 1) // window
    return order


def mix_weights(weights):
    total = 0.0
    for w in weights:  # in order: sum() of floats rounds otherwise since 3.12
        total += w
    if all(w == math.floor(w) for w in weights) and total <= 65536:
        ints = [int(w) for w in weights]
    else:
        ints = [max(1, math.floor(w * 65536 / total + 0.5)) for w in weights]
    g = 0
    for w in ints:
        g = math.gcd(g, w)
    return [w // g for w in ints]


def mix_order(samples, weights, seed, shuffle, per_epoch, epoch):
    """Epoch `epoch` of a mix of sources of `samples` samples each: its global indices."""
    w = mix_weights(weights)
    period, ordinal, credit, count = [], [], [0] * len(w), [0] * len(w)
    for j in range(sum(w)):
        credit = [c + x for c, x in zip(credit, w)]
        s = max(range(len(w)), key=lambda t: (credit[t], -t))
        credit[s] -= sum(w)
        period.append(s)
        ordinal.append(count[s])
        count[s] += 1
    first = [sum(samples[:s]) for s in range(len(samples))]
    u = mix(seed ^ 0x6D6978)

    def draw(position):
        j = position % len(period)
        s = period[j]
        q, i = divmod(position // len(period) * w[s] + ordinal[j], samples[s])
        return first[s] + (feistel(samples[s], mix((u + s) & M), q)(i) if shuffle else i)

    return [draw(epoch * per_epoch + i) for i in range(per_epoch)]
