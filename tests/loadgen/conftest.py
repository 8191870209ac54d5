from tests.faulty.fixtures import faulty_server  # noqa: F401
