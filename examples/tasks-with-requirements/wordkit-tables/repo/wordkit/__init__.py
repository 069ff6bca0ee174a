from wordkit.names import column_name, table_name

__all__ = ["column_name", "table_name"]
