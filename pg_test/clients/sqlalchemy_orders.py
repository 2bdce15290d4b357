"""SQLAlchemy 2 and idgen (docs/clients.md, which shows this file whole but for this docstring):
the table made by SQLAlchemy's own schema tool with DEFAULT snowflake_next() and DEFAULT
uuid_v7(), and the keys the database made read back through SQLAlchemy's normal paths: the ORM's
flush, and an insert of many rows with RETURNING. The driver is psycopg 3.

    python sqlalchemy_orders.py 'postgresql+psycopg://app@/shop?host=/var/run/postgresql'

prints one JSON line: the keys it read back."""
import json
import sys

from sqlalchemy import DDL, BigInteger, Text, Uuid, create_engine, event, insert, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


# the functions the DEFAULTs call: create_all() makes the extension before the tables
event.listen(Base.metadata, "before_create", DDL("CREATE EXTENSION IF NOT EXISTS idgen"))


class Order(Base):
    __tablename__ = "orders"
    # server_default: the database makes the key; autoincrement=False: not a SERIAL/IDENTITY
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False,
                                    server_default=text("snowflake_next()"))
    ref = mapped_column(Uuid, nullable=False, server_default=text("uuid_v7()"))
    customer: Mapped[str] = mapped_column(Text)


def main(url):
    engine = create_engine(url)
    Base.metadata.create_all(engine)  # CREATE EXTENSION IF NOT EXISTS idgen, CREATE TABLE orders
    with Session(engine) as session:
        order = Order(customer="ada")
        session.add(order)
        session.flush()  # INSERT ... RETURNING orders.id, orders.ref: order.id is the key
        first = order.id
        session.commit()
    with engine.begin() as conn:
        rows = [{"customer": f"c{i}"} for i in range(1000)]
        many = conn.execute(insert(Order).returning(Order.id), rows).scalars().all()  # every key
    print(json.dumps({"first": first, "many": many}))


if __name__ == "__main__":
    main(sys.argv[1])  # a URL: postgresql+psycopg://user@host/database
