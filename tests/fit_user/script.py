import keras
from sklearn.datasets import load_digits

digits = load_digits()
x = digits.images.reshape(-1, 64).astype("float32") / 16
y = digits.target
x_train, y_train = x[:1500], y[:1500]
x_val, y_val = x[1500:], y[1500:]


def schedule(epoch, lr):
    return lr if epoch < 2 else lr * 0.7


inputs = keras.Input(shape=(64,))
hidden = keras.layers.Dense(64, activation="relu")(inputs)
hidden = keras.layers.Dropout(0.2)(hidden)
outputs = keras.layers.Dense(10, activation="softmax")(hidden)
model = keras.Model(inputs, outputs)
model.compile(
    optimizer="adam",
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)
model.fit(
    x_train,
    y_train,
    batch_size=32,
    epochs=6,
    validation_data=(x_val, y_val),
    callbacks=[keras.callbacks.LearningRateScheduler(schedule)],
)
model.save("digits.keras")
