"""Every load option at a value other than its default: a test that it reaches where it loads."""

NOT_DEFAULT = {
    "gpu_layers": 3,
    "draft_gpu_layers": 0,
    "threads": 2,
    "n_ctx": 512,
    "draft_max": 4,
    "adaptive": False,
    "p_min": 0.5,
    "copy": False,
    "history": False,
}
