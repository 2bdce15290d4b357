"""SQLModel and idgen (docs/clients.md, which shows this file whole but for this docstring): the
table made by create_all() with DEFAULT snowflake_next() on a BIGINT key, rows added through the
session, the keys read back exact as Python ints; then every row read back a page at a time, the
key as the cursor. The driver is psycopg 3.

    python sqlmodel_orders.py 'postgresql+psycopg://app@/shop?host=/var/run/postgresql'

prints one JSON line: the keys it read back, and the pages."""
import json
import sys

from sqlalchemy import DDL, BigInteger, event, text
from sqlmodel import Field, Session, SQLModel, create_engine, select

# the functions the DEFAULT calls: create_all() makes the extension before the tables
event.listen(SQLModel.metadata, "before_create", DDL("CREATE EXTENSION IF NOT EXISTS idgen"))


class Order(SQLModel, table=True):
    __tablename__ = "orders"
    # sa_type=BigInteger: a plain int field makes an INTEGER column, too small for the key
    id: int | None = Field(default=None, primary_key=True, sa_type=BigInteger,
                           sa_column_kwargs={"server_default": text("snowflake_next()"), "autoincrement": False})
    customer: str


def main(url):
    engine = create_engine(url)
    SQLModel.metadata.create_all(engine)  # CREATE EXTENSION IF NOT EXISTS idgen, CREATE TABLE orders
    with Session(engine) as session:
        one = Order(customer="ada")
        session.add(one)
        session.flush()  # INSERT ... RETURNING orders.id: one.id is the key
        many = [Order(customer=f"c{i}") for i in range(1000)]
        session.add_all(many)
        session.flush()  # every key
        first, keys = one.id, [order.id for order in many]
        session.commit()
        # latest first, 100 a page: the last key of a page is the cursor of the next
        pages, cursor = [], None
        while True:
            query = select(Order.id).order_by(Order.id.desc()).limit(100)
            page = session.exec(query if cursor is None else query.where(Order.id < cursor)).all()
            if not page:
                break
            pages.append(page)
            cursor = page[-1]
    print(json.dumps({"first": first, "many": keys, "pages": pages}))


if __name__ == "__main__":
    main(sys.argv[1])  # a URL: postgresql+psycopg://user@host/database
