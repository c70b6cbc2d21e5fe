"""Recurrent layers: ``nnet::lstm_stack`` and ``nnet::gru_stack`` (nnet_recurrent.h), io_parallel.

What hls4ml 1.3.0 writes for the Vivado/Vitis backends (recurrent_templates.py) and the C++
computes, one time step at a time (``iloop``), state zeroed before the first step:

* two ``nnet::dense`` products per step, ``mult_config1`` on the step's input slice and
  ``mult_config2`` on the previous hidden state (each with its own weight, bias, accumulator
  and kernel: latency or resource, replayed by ``dense.py``), both written as ``accum_t``;
* gate sums ``tmpres[k] + tmpres_state[k]`` cast to ``accum_t``;
* the activations through ``nnet::activation::{relu,sigmoid,tanh}`` of nnet_recr_activations.h,
  which only forward to ``nnet::relu/sigmoid/tanh`` of nnet_activation.h: the same tables,
  built by ``activations.py``'s builders from the ``*_config<N>[_recr]`` structs. Those three
  are the only classes the header defines; any other name does not compile and is refused;
* LSTM (Keras gate order i, f, c, o, which PyTorch's i, f, g, o matches):
  ``s = c~ * i + s * f`` and ``h = o * act(s)``, each an exact ap_fixed expression assigned
  to the result type (``res_T``), ``act(s)`` reading ``s`` as ``res_T`` and writing ``accum_t``;
* GRU (Keras z, r, h; ``pytorch_order`` r, z, n): the reset gate multiplies the recurrent
  product of the candidate (``r * (W_h h + b_h)``, i.e. "reset after" whatever Keras'
  ``reset_after`` said), cast to ``accum_t``, added to the input product, activated, then
  ``h = (res_T)(h~ * (1 - z) + h * z)`` exactly (``1 - z`` is ``ap_fixed<32,32>(1) - z``, exact).

``n_sequence_out > 1`` (return_sequences) writes every step's ``h``, else the last one.
``use_static`` only moves the state into function statics, reset at the first step of every
call, so the results are the same. ``lstm_stack`` instantiates the non-static ``nnet::lstm``
in any case (a plain ``if`` on use_static), which hands its ``accum_t`` scratch to a dense
writing ``res_T`` and the ``res_T`` state to one reading ``data_T``: g++ accepts an LSTM only
when the three types are one, other LSTMs are refused as hls4ml cannot compile them.

Not emulated (refused at load): the initial-state calls (PyTorch ``h0``/``c0`` inputs),
``bidirectional_stack``, Keras GRU ``reset_after=False`` (hls4ml writes one-value bias arrays
the products read past: dense.py refuses the sizes). hls4ml writes no call at all for a
SimpleRNN on this backend. Runs on int64 raws: the input products of every step in one
call, then one Python iteration per time step, each vectorised over the rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .dense import fast_from_raw
from .registry import BUILDERS, register

if TYPE_CHECKING:
    from .model import FixedPointModel

#: nnet::activation:: classes nnet_recr_activations.h defines (each forwards to nnet::<name>)
_RECR_ACTIVATIONS = ("relu", "sigmoid", "tanh")


def _dense_step(m: FixedPointModel, layer: Layer, key: str, in_t: FixedType, out_t: FixedType, w: str, b: str):
    """``nnet::dense<in_t, out_t, CONFIG_T::<key>>`` as dense.py builds a top-level Dense."""
    name, config = m.sub_config(layer, key)
    sub = Layer("dense", layer.name, [str(in_t), str(out_t), name], ["", "", w, b], name, config)
    sub.weights = layer.weights
    op, got_t = BUILDERS["dense"](m, sub, in_t)[:2]
    if got_t != out_t:
        raise UnsupportedLayerError(f"{layer.describe()}: {name} writes {got_t}, expected {out_t}")
    return op, const_int(sub, "n_in"), const_int(sub, "n_out")


def _activation_step(m: FixedPointModel, layer: Layer, using: str, key: str, in_t: FixedType, out_t: FixedType):
    """``CONFIG_T::template <using><in_t, out_t, CONFIG_T::<key>>::activation``."""
    target = layer.config.get("using", {}).get(using, "")
    kind = target.split("::")[-1]
    if not target.startswith("nnet::activation::") or kind not in _RECR_ACTIVATIONS:
        raise UnsupportedLayerError(
            f"{layer.describe()}: {using} = '{target}': nnet_recr_activations.h defines only "
            f"{', '.join(_RECR_ACTIVATIONS)} (hls4ml cannot compile another)"
        )
    name, config = m.sub_config(layer, key)
    sub = Layer(kind, layer.name, [str(in_t), str(out_t), name], [], name, config)
    op, got_t = BUILDERS[kind](m, sub, in_t)[:2]
    if got_t != out_t:
        raise UnsupportedLayerError(f"{layer.describe()}: {kind} via {name} writes {got_t}, expected {out_t}")
    return op


def _align(raw: np.ndarray, frac: int, to: int) -> np.ndarray:
    """The exact value raw * 2**-frac as a raw with ``to`` >= frac fractional bits."""
    return raw << np.int64(to - frac) if to > frac else raw


@register("gru_stack", "lstm_stack")
def build_recurrent(m: FixedPointModel, layer: Layer, in_t: FixedType):
    lstm = layer.kind == "lstm_stack"
    if len(layer.args) != 6 or len(layer.template) != 3:
        raise UnsupportedLayerError(
            f"{layer.describe()}: only the call without initial states (data, res, w, wr, b, br) is emulated"
        )
    res_t = m.type_of(layer.template[1], layer)
    acc_t = m.config_type(layer, "accum_t")
    n_mult = 4 if lstm else 3
    n_in, n_state = const_int(layer, "n_in"), const_int(layer, "n_state")
    n_seq, n_seq_out = const_int(layer, "n_sequence"), const_int(layer, "n_sequence_out")
    if n_seq_out not in (1, n_seq):
        raise UnsupportedLayerError(f"{layer.describe()}: n_sequence_out {n_seq_out} is neither 1 nor {n_seq}")
    pytorch = layer.config.get("consts", {}).get("pytorch_order", "false").strip() == "true"
    if lstm and not in_t == res_t == acc_t:
        # lstm_stack instantiates nnet::lstm even when use_static picks lstm_static (a plain `if`),
        # and nnet::lstm hands its accum_t scratch to dense<data_T, res_T> and h (res_T) as data_T
        raise UnsupportedLayerError(
            f"{layer.describe()}: hls4ml compiles lstm_stack only when the input, result and accum_t types "
            f"are one type ({in_t}, {res_t}, {acc_t})"
        )
    x_dense, n_in1, n_out1 = _dense_step(m, layer, "mult_config1", in_t, acc_t, layer.args[2], layer.args[4])
    h_dense, n_in2, n_out2 = _dense_step(m, layer, "mult_config2", res_t, acc_t, layer.args[3], layer.args[5])
    if (n_in1, n_out1, n_in2, n_out2) != (n_in, n_mult * n_state, n_state, n_mult * n_state):
        raise UnsupportedLayerError(
            f"{layer.describe()}: products {n_in1}x{n_out1} and {n_in2}x{n_out2} do not fit "
            f"n_in {n_in}, n_state {n_state}"
        )
    act_key = "ACT_CONFIG_LSTM" if lstm else "ACT_CONFIG_GRU"
    recr_act = _activation_step(m, layer, "activation_recr", act_key, acc_t, acc_t)
    act = _activation_step(m, layer, "activation", "ACT_CONFIG_T", acc_t, acc_t)
    fa, fr = acc_t.frac, res_t.frac
    f_one = max(fa, 0)  # GRU's 1 - z: ap_fixed<32,32>(1) - z, exact on the finer of the two grids
    # the two exact products summed into the new state, and the grid their sum is formed on
    a_max, r_max = acc_t.max_abs_raw(), res_t.max_abs_raw()
    if lstm:
        terms = [(a_max * a_max, 2 * fa), (r_max * a_max, fr + fa)]  # c~ * i, s * f
    else:
        one_z = (1 << f_one) + (a_max << (f_one - fa))
        terms = [(a_max * one_z, fa + f_one), (r_max * a_max, fr + fa)]  # h~ * (1 - z), h * z
    f_mix = max(f for _, f in terms)
    m.check_width(layer, sum(v << (f_mix - f) for v, f in terms).bit_length() + 1, "the state update")
    n = n_state
    # the casts of the step (the accumulator's, and the state's from the products' grid)
    acc_sum, state = fast_from_raw(acc_t, fa), fast_from_raw(res_t, f_mix)

    if lstm:
        act_s = _activation_step(m, layer, "activation", "ACT_CONFIG_T", res_t, acc_t)
        hidden = fast_from_raw(res_t, 2 * fa)
        ifo = np.r_[0 : 2 * n, 3 * n : 4 * n]  # i, f, o (keras notation), then c at 2n..3n

        def step(a, b, h, s):
            pre = acc_sum(a + b)
            gates = recr_act(pre[:, ifo])
            i, f, o = gates[:, :n], gates[:, n : 2 * n], gates[:, 2 * n :]
            c = act(pre[:, 2 * n : 3 * n])
            s = state(_align(c * i, 2 * fa, f_mix) + _align(s * f, fr + fa, f_mix))
            h = hidden(o * act_s(s))
            return h, s

    else:
        r_at, z_at = (0, n) if pytorch else (n, 0)
        acc_prod = fast_from_raw(acc_t, 2 * fa)
        one = np.int64(1) << np.int64(f_one)

        def step(a, b, h, s):
            zr = recr_act(acc_sum(a[:, : 2 * n] + b[:, : 2 * n]))
            r, z = zr[:, r_at : r_at + n], zr[:, z_at : z_at + n]
            cand = acc_sum(a[:, 2 * n :] + acc_prod(r * b[:, 2 * n :]))
            hh = act(cand)
            keep = one - _align(z, fa, f_one)
            mix = _align(hh * keep, fa + f_one, f_mix) + _align(h * z, fr + fa, f_mix)
            return state(mix), s

    def recurrent(x):
        rows = x.shape[0]
        h = np.zeros((rows, n), np.int64)
        s = np.zeros((rows, n), np.int64)
        outs = []
        # the input products depend on no state: every step's at once, (rows * n_seq, n_in)
        # rows in (row, step) order; the state products of the zero state are one row's
        xa = x_dense(x.reshape(rows * n_seq, n_in)).reshape(rows, n_seq, n_mult * n)
        b0 = np.broadcast_to(h_dense(np.zeros((1, n), np.int64)), (rows, n_mult * n))
        for t in range(n_seq):  # the state carries from step to step: one iteration per time step
            h, s = step(xa[:, t], b0 if t == 0 else h_dense(h), h, s)
            if n_seq_out > 1:
                outs.append(h)
        return np.concatenate(outs, axis=1) if n_seq_out > 1 else h

    return recurrent, res_t
