import numpy as np
import pytest

from loco_policy import spec, transition


def row(seq, **kw):
    values = dict(
        seq=seq, episode=3, policy_version=2**32 - 1, mode='WALK',
        obs=np.linspace(-1, 1, spec.OBS_DIM), action=np.full(12, 0.5),
        reward_terms=np.arange(len(transition.REWARD_TERMS), dtype=float),
        terminated=False, truncated=seq == 11,
    )  # fmt: skip
    values.update(kw)
    return transition.TransitionRow(**values)


def test_pack_unpack_round_trip_with_exact_integers():
    dims, data = transition.pack_rows([row(10), row(11), row(2**31 + 12345)])
    assert dims[1] == (transition.SCHEMA, transition.ROW_WIDTH, transition.ROW_WIDTH)
    assert data.dtype == np.float32 and data.size == 3 * transition.ROW_WIDTH
    rows = transition.unpack_rows(dims, data)
    assert [r.seq for r in rows] == [10, 11, 2**31 + 12345]
    assert rows[0].policy_version == 2**32 - 1 and rows[1].truncated and not rows[0].truncated
    assert np.allclose(rows[0].obs, np.linspace(-1, 1, 48), atol=1e-6)
    assert transition.gaps(rows[:2]) == [] and transition.gaps([rows[0], row(13)]) == [11, 12]


def test_malformed_batches_are_rejected():
    dims, data = transition.pack_rows([row(1)])
    with pytest.raises(ValueError, match='schema'):
        transition.unpack_rows([dims[0], ('other', dims[1][1], dims[1][2])], data)
    with pytest.raises(ValueError, match='holds'):
        transition.unpack_rows(dims, data[:-1])
    broken = data.copy()
    broken[5] = np.nan
    with pytest.raises(ValueError, match='non-finite'):
        transition.unpack_rows(dims, broken)
    broken = data.copy()
    broken[1] = 0.5  # seq low half not an integer
    with pytest.raises(ValueError, match='16-bit'):
        transition.unpack_rows(dims, broken)
    with pytest.raises(ValueError, match='non-finite'):
        transition.pack_rows([row(1, action=np.full(12, np.nan))])
    for bad in (-0.5, 3e30):  # finite, but no square or exponential gives it
        terms = np.arange(len(transition.REWARD_TERMS), dtype=float)
        terms[5] = bad
        with pytest.raises(ValueError, match='reward terms'):
            transition.unpack_rows(*transition.pack_rows([row(1, reward_terms=terms)]))


def test_reward_terms_of_perfect_tracking():
    terms = transition.reward_terms(
        [0.5, 0.0, 0.0], [0.0, 0.0, 0.2], [1, 0, 0, 0], [0.5, 0.0, 0.2], np.zeros(12),
        np.zeros(12), np.zeros(12),
    )  # fmt: skip
    assert terms.shape == (len(transition.REWARD_TERMS),)
    assert terms[0] == pytest.approx(1.0) and terms[1] == pytest.approx(1.0)
    assert np.allclose(terms[2:], 0.0)
