"""The trap docs/clients.md warns of, shown failing: SQLModel's natural key, `id: int | None =
Field(primary_key=True)`, with the DEFAULT but without sa_type=BigInteger. create_all() makes an
INTEGER column, and the first insert fails: snowflake_next() does not fit. Also counts the
INSERTs SQLModel's session sends for 1,000 new rows (with the BIGINT model, in another table).

    python sqlmodel_int_trap.py URL

prints one JSON line."""
import json
import sys

from sqlalchemy import BigInteger, event, text
from sqlalchemy.exc import DBAPIError
from sqlmodel import Field, Session, SQLModel, create_engine


class Order(SQLModel, table=True):
    __tablename__ = "int_orders"
    id: int | None = Field(default=None, primary_key=True,
                           sa_column_kwargs={"server_default": text("snowflake_next()")})
    customer: str


class Counted(SQLModel, table=True):
    __tablename__ = "counted"
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInteger,
                           sa_column_kwargs={"server_default": text("snowflake_next()"), "autoincrement": False})
    customer: str


def main(url):
    engine = create_engine(url)
    SQLModel.metadata.create_all(engine)  # the extension is there already (sqlmodel_orders.py)
    with engine.connect() as conn:
        column = conn.execute(text("SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                                   " WHERE attrelid = 'int_orders'::regclass AND attname = 'id'")).scalar()
    error = None
    with Session(engine) as session:
        session.add(Order(customer="ada"))
        try:
            session.flush()
        except DBAPIError as e:
            error = {"sqlstate": e.orig.sqlstate, "message": str(e.orig).splitlines()[0]}
    inserts = []

    @event.listens_for(engine, "before_cursor_execute")
    def count(conn, cursor, statement, *rest):
        if statement.startswith("INSERT"):
            inserts.append(statement)

    with Session(engine) as session:
        session.add_all([Counted(customer=f"c{i}") for i in range(1000)])
        session.commit()
    print(json.dumps({"column": column, "error": error, "inserts": len(inserts)}))


if __name__ == "__main__":
    main(sys.argv[1])
