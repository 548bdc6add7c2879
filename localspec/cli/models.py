"""`localspec models` (placeholder until its issue lands)."""


def register(sub) -> None:
    p = sub.add_parser("models", help="(not built yet)")
    p.set_defaults(func=lambda args: (_ for _ in ()).throw(SystemExit("not built yet")))
