"""Table and column names for model classes."""

import inflection


def table_name(model: str) -> str:
    """The table of a model class: snake case and plural (``BlogPost`` -> ``blog_posts``)."""
    return inflection.underscore(model)


def column_name(attribute: str) -> str:
    """A column name for a camelCase attribute (``createdAt`` -> ``created_at``)."""
    return inflection.underscore(attribute)
