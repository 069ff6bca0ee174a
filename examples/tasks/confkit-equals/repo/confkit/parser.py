"""Parse ``key = value`` lines grouped under optional ``[section]`` headers."""


class ConfigError(ValueError):
    """A line that cannot be read; the message names the line number."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _unquote(value):
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def parse(text):
    """Return a flat dict; keys under a section are prefixed ``section.``."""
    result = {}
    section = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise ConfigError("line %d: bad section header %r" % (number, raw))
            section = line[1:-1].strip() + "."
            continue
        if "=" not in line:
            raise ConfigError("line %d: expected 'key = value', got %r" % (number, raw))
        key, value = line.split("=")
        key = key.strip()
        if not key:
            raise ConfigError("line %d: empty key" % number)
        result[section + key] = _unquote(value.strip())
    return result


def get_int(config, key, default=None):
    """The value of ``key`` as an int, or ``default`` when it is missing."""
    if key not in config:
        return default
    try:
        return int(config[key])
    except ValueError:
        raise ConfigError("%s: %r is not an integer" % (key, config[key])) from None


def get_bool(config, key, default=False):
    """The value of ``key`` as a bool (1/0, true/false, yes/no, on/off)."""
    if key not in config:
        return default
    value = config[key].lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError("%s: %r is not a boolean" % (key, config[key]))
