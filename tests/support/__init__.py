"""What the tests share: fakes of the models and the hub, tiny GGUF writers, the live server."""
