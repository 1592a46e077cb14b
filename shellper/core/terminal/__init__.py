"""What the project knows of terminals, pure: one VT500-style parser (:mod:`.parser`) and what is built on
its grammar: the screen model (:mod:`.screen`), the mode checkpoints (:mod:`.modes`), the strippers
(:mod:`.text`) and the query filter (:mod:`.queries`)."""
