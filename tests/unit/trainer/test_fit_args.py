"""FitArgs is model.fit's signature: a port moves the call's arguments unchanged."""

import inspect

import keras

from spottrain import FitArgs


def test_fit_args_are_keras_fits_parameters_in_order_with_its_defaults():
    fit = inspect.signature(keras.Model.fit).parameters
    ours = inspect.signature(FitArgs).parameters
    assert list(ours) == [name for name in fit if name != "self"]
    for name, p in ours.items():
        assert p.default == fit[name].default, name


def test_a_fit_call_moves_unchanged_positional_x_and_y_and_keywords():
    args = FitArgs([1, 2], [3, 4], batch_size=2, epochs=3, validation_split=0.5)
    assert (args.x, args.y, args.batch_size, args.epochs) == ([1, 2], [3, 4], 2, 3)
    assert args.given() == {
        "x": [1, 2],
        "y": [3, 4],
        "batch_size": 2,
        "epochs": 3,
        "validation_split": 0.5,
    }
