"""The package version and the container image built from it (one source of truth)."""

__version__ = "0.1.0"

# Components and pipelines run this image; `make image` builds and pushes it.
# Retag with `make image IMAGE=...` and compile with `--image` for your own registry.
IMAGE_REPO = "us-docker.pkg.dev/spottrain/spottrain/trainer"
IMAGE = f"{IMAGE_REPO}:{__version__}"
