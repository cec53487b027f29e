"""schemathesis hooks for planfiles: send git's binary request bodies (upload-pack, receive-pack) as they are."""
import schemathesis


def _raw(value):
    """A generated binary body (format: binary) as raw bytes."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    data = getattr(value, "data", None)
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    return str(value).encode()


@schemathesis.serializer("application/x-git-upload-pack-request")
def git_upload_pack_request(ctx, value):
    return _raw(value)


@schemathesis.serializer("application/x-git-receive-pack-request")
def git_receive_pack_request(ctx, value):
    return _raw(value)
