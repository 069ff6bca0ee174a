import inflection

from wordkit import column_name, table_name


def test_column_name_is_snake_case():
    assert column_name("createdAt") == "created_at"


def test_table_name_is_snake_case():
    assert table_name("BlogPost").startswith("blog_post")
