import pytest
from kubernetes.client.exceptions import ApiException

from autoclusters.kube import errors


@pytest.mark.parametrize(("status", "cls"), [
    (404, errors.NotFound), (409, errors.Conflict), (403, errors.Forbidden), (422, errors.Invalid),
    (429, errors.TooManyRequests), (500, errors.Unavailable), (503, errors.Unavailable), (418, errors.KubeError),
])
def test_api_errors_are_translated_once(status: int, cls: type) -> None:
    body = '{"kind":"Status","message":"the server said no"}'
    err = errors.translate(ApiException(status=status, reason="x", body=body))
    assert type(err) is cls
    assert err.status == status
    assert str(err) == "the server said no"


def test_connection_errors_become_unavailable() -> None:
    with pytest.raises(errors.Unavailable, match="ConnectionRefusedError"), errors.translated():
        raise ConnectionRefusedError("refused")


def test_other_exceptions_pass_through() -> None:
    with pytest.raises(ZeroDivisionError), errors.translated():
        _ = 1 / 0
