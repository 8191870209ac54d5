"""The bundled target server as an ASGI app, for running it under a server of your choice from a
clone: ``uvicorn --app-dir target_server app:app``. Settings come from the environment the same
way Gunicorn workers get them (see :func:`streamslo.server.app.create_app`)."""

from streamslo.server.app import create_app

app = create_app()
