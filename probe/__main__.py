from .api.cli import run

run()
