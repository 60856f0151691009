"""Generate magma_torch/query/data/intent_questions.jsonl: the intent head's training set.

    python experiments/intent/make_questions.py magma_torch/query/data/intent_questions.jsonl

Every row is {"question", "intent", "group"}. A template's rows share one group ("tpl:WHEN:7"),
each hand-written question is a group of its own; train_intent holds whole groups aside for
validation, so the reported validation accuracy is on phrasings the head never saw in training.

Labelling rule (the same one experiments/intent/dev_labelled_100.jsonl follows):
  WHEN   - the answer is a time: a date, year, month, season, age, duration, frequency or an order
           of events ("When did…", "How long…", "What year…", "Which came first…").
  WHY    - the answer is a reason, cause, motivation or purpose ("Why…", "What made…",
           "What motivated…", "How come…").
  ENTITY - everything else: people, things, places, activities, opinions, counts, likely
           preferences ("What does X like…", "How many…", "Would X…"), even when the question
           mentions a time ("What did X do last weekend?").
Nothing here is copied from LoCoMo: names, events and phrasings are written for this project.
"""
import json
import random
import re
import sys

rng = random.Random(13)

NAMES = [  # (name, gender): m / f / n (they)
 ("Sam","m"),("Maria","f"),("Jo","f"),("Tom","m"),("Ana","f"),("Leo","m"),("Priya","f"),("Marcus","m"),
 ("Chloe","f"),("Dev","m"),("Nina","f"),("Omar","m"),("Hannah","f"),("Caleb","m"),("Yuki","f"),("Rafael","m"),
 ("Bea","f"),("Elliot","m"),("Grace","f"),("Jamal","m"),("Ines","f"),("Kofi","m"),("Lena","f"),("Mateo","m"),
 ("Zoe","f"),("Arjun","m"),("Fatima","f"),("Noah","m"),("Beatrix","f"),("Desmond","m"),("Harriet","f"),
 ("Ignacio","m"),("Keiko","f"),("Lucas","m"),("Mirela","f"),("Nathaniel","m"),("Odette","f"),("Pavel","m"),
 ("Quinn","n"),("Rowan","n"),("Sunita","f"),("Tariq","m"),("Ulla","f"),("Vikram","m"),("Wren","n"),
 ("Xiomara","f"),("Yusuf","m"),("Zainab","f"),("Benedict","m"),("Carmen","f"),("Dmitri","m"),("Esther","f"),
 ("Florian","m"),("Gwen","f"),("Henrik","m"),("Ayesha","f"),("Jonah","m"),("Kavya","f"),("Lorenzo","m"),
 ("Magnus","m"),("Naledi","f"),("Oscar","m"),("Penelope","f"),("Ricardo","m"),("Siobhan","f"),("Tobias","m"),
 ("Valentina","f"),("Winston","m"),("Alexis","n"),("Brooke","f"),("Cyrus","m"),("Delphine","f"),("Emeka","m"),
 ("Frida","f"),("Gideon","m"),("Hazel","f"),("Isaac","m"),("Jasmine","f"),("Kenji","m"),("Lucia","f"),
 ("Milo","m"),("Nadia","f"),("Otis","m"),("Paloma","f"),("Reuben","m"),("Sakura","f"),("Theodore","m"),
 ("Uma","f"),("Vera","f"),("Wyatt","m"),("Ximena","f"),("Yannick","m"),("Zara","f"),("Aurora","f"),("Bruno","m"),
]
PRON = {"m": ("he", "his"), "f": ("she", "her"), "n": ("they", "their")}
RELS = ["sister","brother","mom","dad","partner","best friend","boss","roommate","grandmother","grandfather",
        "son","daughter","coworker","uncle","aunt","fiancé","fiancée","husband","wife","girlfriend","boyfriend",
        "cousin","neighbour","mentor","teammate","kids","parents","landlord","therapist","bandmate"]


def subject():
    """A question's subject with the forms its templates need (verb agreement, possessives)."""
    (a, g), (b, _) = rng.sample(NAMES, 2)
    he, his = PRON[g]
    kind = rng.random()
    if kind < 0.62:
        s = dict(s=a, sp=f"{a}'s", pos=his, he=he, plural=g == "n")
    elif kind < 0.77:
        s = dict(s=f"{a} and {b}", sp=f"{a} and {b}'s", pos="their", he="they", plural=True)
    elif kind < 0.9:
        r = rng.choice(["girlfriend","boyfriend","partner","wife","husband","kids","family","friends","sister",
                        "brother","mom","dad","roommate","best friend","coworkers","bandmates"])
        s = dict(s=f"{a} and {his} {r}", sp=f"{a} and {his} {r}'s", pos="their", he="they", plural=True)
    else:
        r = rng.choice(RELS)
        pl = r in ("kids", "parents")
        s = dict(s=f"{a}'s {r}", sp=f"{a}'s {r}'" + ("" if pl else "s"), pos="their" if pl else rng.choice(["his", "her"]),
                 he="they" if pl else rng.choice(["he", "she"]), plural=pl)
    pl = s["plural"]
    s.update(does="do" if pl else "does", is_="are" if pl else "is", was="were" if pl else "was",
             has="have" if pl else "has", name=a, other=b)
    return s

# one-off events: (base, past); {pos} is the subject's possessive
EVENTS = [
 ("quit {pos} job","quit {pos} job"),("move to Portland","moved to Portland"),("adopt a cat","adopted a cat"),
 ("start a pottery class","started a pottery class"),("sell {pos} car","sold {pos} car"),
 ("break up","broke up"),("go back to school","went back to school"),("run {pos} first marathon","ran {pos} first marathon"),
 ("visit {pos} grandparents in Ohio","visited {pos} grandparents in Ohio"),("get a tattoo","got a tattoo"),
 ("open a bakery","opened a bakery"),("cancel the trip to Japan","cancelled the trip to Japan"),
 ("switch to night shifts","switched to night shifts"),("join a choir","joined a choir"),("buy a house","bought a house"),
 ("take up rock climbing","took up rock climbing"),("change majors","changed majors"),("get engaged","got engaged"),
 ("start a podcast","started a podcast"),("delete {pos} social media accounts","deleted {pos} social media accounts"),
 ("stop eating meat","stopped eating meat"),("apply for the promotion","applied for the promotion"),
 ("repaint the living room","repainted the living room"),("begin therapy","began therapy"),
 ("reconnect with {pos} father","reconnected with {pos} father"),("leave the band","left the band"),
 ("launch an online shop","launched an online shop"),("take a gap year","took a gap year"),
 ("sign up for the half marathon","signed up for the half marathon"),("start journaling","started journaling"),
 ("adopt a rescue dog","adopted a rescue dog"),("fly to Lisbon","flew to Lisbon"),("switch careers","switched careers"),
 ("drop out of the cooking course","dropped out of the cooking course"),("host a game night","hosted a game night"),
 ("learn to swim","learned to swim"),("sell the family cabin","sold the family cabin"),
 ("start a vegetable garden","started a vegetable garden"),("skip the reunion","skipped the reunion"),
 ("go on a solo road trip","went on a solo road trip"),("buy a new camera","bought a new camera"),
 ("turn down the job offer","turned down the job offer"),("enroll in night classes","enrolled in night classes"),
 ("get a second dog","got a second dog"),("go camping in the mountains","went camping in the mountains"),
 ("visit the art museum","visited the art museum"),("attend a jazz festival","attended a jazz festival"),
 ("go to a cooking workshop","went to a cooking workshop"),("take a trip to the coast","took a trip to the coast"),
 ("go on a brewery tour","went on a brewery tour"),("see the fireworks","saw the fireworks"),
 ("go to the farmers market","went to the farmers market"),("throw a surprise party","threw a surprise party"),
 ("paint a mural","painted a mural"),("finish {pos} thesis","finished {pos} thesis"),
 ("get a promotion","got a promotion"),("lose {pos} wallet","lost {pos} wallet"),("win the chess tournament","won the chess tournament"),
 ("perform at the open mic","performed at the open mic"),("give a talk at the library","gave a talk at the library"),
 ("sprain {pos} ankle","sprained {pos} ankle"),("have surgery","had surgery"),("get a new phone","got a new phone"),
 ("meet {pos} new neighbours","met {pos} new neighbours"),("go to a charity gala","went to a charity gala"),
 ("start a book club","started a book club"),("visit Paris","visited Paris"),("go skiing","went skiing"),
 ("go to a baseball game","went to a baseball game"),("take a pottery class","took a pottery class"),
 ("volunteer at the animal shelter","volunteered at the animal shelter"),("buy a vintage guitar","bought a vintage guitar"),
 ("publish {pos} first article","published {pos} first article"),("sign a record deal","signed a record deal"),
 ("go on a hiking trip with friends","went on a hiking trip with friends"),("move into a new apartment","moved into a new apartment"),
 ("attend a parenting workshop","attended a parenting workshop"),("join a support group","joined a support group"),
 ("organise a fundraiser","organised a fundraiser"),("take the kids to the zoo","took the kids to the zoo"),
 ("go to a concert","went to a concert"),("visit a vineyard","visited a vineyard"),("go kayaking","went kayaking"),
 ("have a picnic in the park","had a picnic in the park"),("start a new job","started a new job"),
 ("get {pos} driving licence","got {pos} driving licence"),("graduate","graduated"),("go to the beach","went to the beach"),
 ("bake a cake for the party","baked a cake for the party"),("run a charity 5K","ran a charity 5K"),
 ("go on a cruise","went on a cruise"),("take a photography course","took a photography course"),
 ("go to a comedy show","went to a comedy show"),("read {pos} poem at the festival","read {pos} poem at the festival"),
 ("plant tomatoes","planted tomatoes"),("buy a motorcycle","bought a motorcycle"),("get married","got married"),
 ("have a baby","had a baby"),("celebrate {pos} anniversary","celebrated {pos} anniversary"),
 ("go to the dentist","went to the dentist"),("fix the roof","fixed the roof"),("sell {pos} paintings at the fair","sold {pos} paintings at the fair"),
 ("travel to Mexico","travelled to Mexico"),("go on a retreat","went on a retreat"),("join the gym","joined the gym"),
 ("try surfing","tried surfing"),("start learning piano","started learning piano"),("record an album","recorded an album"),
]
HABITS = [  # (base, gerund)
 ("play guitar","playing guitar"),("live in Boston","living in Boston"),("work as a nurse","working as a nurse"),
 ("learn Japanese","learning Japanese"),("volunteer at the food bank","volunteering at the food bank"),
 ("run every morning","running every morning"),("paint landscapes","painting landscapes"),("teach yoga","teaching yoga"),
 ("write {pos} novel","writing {pos} novel"),("collect vinyl records","collecting vinyl records"),
 ("coach the soccer team","coaching the soccer team"),("knit","knitting"),("bake sourdough","baking sourdough"),
 ("go to the climbing gym","going to the climbing gym"),("study for the bar exam","studying for the bar exam"),
 ("foster kittens","fostering kittens"),("play in a jazz band","playing in a jazz band"),("mentor new hires","mentoring new hires"),
 ("meditate","meditating"),("practise calligraphy","practising calligraphy"),("do pottery","doing pottery"),
 ("play the violin","playing the violin"),("work at the hospital","working at the hospital"),("go swimming","going swimming"),
 ("write poetry","writing poetry"),("take dance lessons","taking dance lessons"),("play video games","playing video games"),
 ("garden","gardening"),("skateboard","skateboarding"),("ride horses","riding horses"),("do photography","doing photography"),
 ("run a small business","running a small business"),("cook for {pos} family","cooking for {pos} family"),
 ("go to church","going to church"),("play basketball","playing basketball"),("draw comics","drawing comics"),
]
EVENT_NOUNS = ["birthday","wedding","graduation","piano recital","move to Denver","first marathon","trip to Japan",
 "job interview","knee surgery","housewarming party","promotion","engagement","art exhibition","camping trip",
 "sister's baby shower","first date","book club meeting","dog's adoption","visit to the Grand Canyon","retirement party",
 "road trip","concert","first gig","charity event","family reunion","vacation","hospital stay","dance recital",
 "photo shoot","anniversary dinner","beach trip","pottery class","job offer","breakup","first day at work",
 "painting workshop","conference talk","book launch","tournament","honeymoon"]
THINGS = ["book","movie","food","band","colour","hiking trail","board game","TV show","restaurant","song","dessert",
 "season","sport","podcast","city","painter","video game","flower","coffee order","author","animal","holiday",
 "instrument","snack","cuisine","musician","artist","place to relax","childhood memory","quote"]
ACTIVITIES = ["hiking","a jazz concert","camping","a cooking class","a board game night","a pottery workshop",
 "a long road trip","a yoga retreat","a science fiction novel","a museum visit","surfing lessons","a wine tasting",
 "a karaoke night","birdwatching","a baking competition","a poetry reading","a trip to the aquarium","a rock concert",
 "a week at the beach","a painting class","a marathon","a theatre play","a camping weekend","a classical music recital",
 "a volunteering day","a dog show","a comic convention","ice skating","a salsa class","a road cycling race"]
PLACES = ["the conference","the farmers market","the wedding","the gym","the book club","yoga class","the concert",
 "the beach party","the charity run","the museum","the pottery workshop","the airport","the dog park","the festival",
 "the support group","the art show","the library","the park","the family dinner","the parade","the retreat","the café"]
FEELINGS = ["upset","nervous","excited","disappointed","frustrated","so happy","relieved","anxious","embarrassed",
 "proud","annoyed","heartbroken","stressed","grateful","lonely","overwhelmed","hopeful","inspired"]
CONTEXTS = ["after the dinner party","about the job interview","during the trip","at the wedding","about {pos} sister's visit",
 "last week","on {pos} birthday","after talking to {pos} mom","about the move","with {pos} roommate","after the concert",
 "about the test results","at work yesterday","about the adoption","after the race","about the new project",
 "when the package arrived","after the phone call"]
NOUNS_WHY = ["breakup","career change","injury","stress at work","falling out with {pos} sister","sudden move",
 "decision to go vegan","change of heart about the wedding","bad mood","interest in astronomy","love of hiking",
 "fear of flying","burnout","argument with {pos} neighbour","passion for photography","interest in painting",
 "decision to adopt","choice of college","new diet","enthusiasm for the project","dislike of crowds"]
TIMEWORDS = ["on 7 March, 2023","on June 14, 2022","in October 2023","in summer 2021","on 2 August, 2023",
 "recently","last week","a few days ago","earlier this year","on her trip in 2022","on 19 January, 2023","last weekend","last summer","in May","on {pos} birthday","over the holidays","in 2022","yesterday",
 "last year","this morning","on Saturday","during the vacation","after work","in the spring","at the weekend",
 "on New Year's Eve","in college","as a kid","last month"]
STATES = ["in the hospital","unemployed","living abroad","away on the tour","part of the band","on the team",
 "in therapy","single","in the choir","a member of the club","at {pos} old job","working from home","vegetarian"]
MOTIVE = ["stay motivated","stay focused","relax after work","feel calm","keep going on hard days","feel creative",
 "feel closer to {pos} family","stay positive","deal with stress","find inspiration"]
YEARS = ["2019","2020","2021","2022","2023"]
MONTHS = ["January","March","May","June","August","October","December"]

# Templates: {s} subject, {sp} its possessive, {pos} his/her/their, {he} pronoun, {does}/{is_}/{was}/{has}
# agreeing verbs, {e}/{ep} an event (base/past), {h}/{hg} a habit (base/gerund), {v}/{v2} event nouns,
# {t} thing, {a} activity, {l} place, {r} relative, {f} feeling, {c} context, {n} why-noun, {tw} time phrase,
# {y} year, {mo} month, {other} another name.
WHY_T = [
 "Why did {s} {e}?","What made {s} {e}?","What led {s} to {e}?","What motivated {s} to {e}?",
 "For what reason did {s} {e}?","What was the reason {s} decided to {e}?","How come {s} decided to {e}?",
 "Explain why {s} chose to {e}.","What inspired {s} to {e}?","What prompted {s} to {e}?","What pushed {s} to {e}?",
 "What was behind {sp} decision to {e}?","Can you tell me why {s} wanted to {e}?","What convinced {s} to {e}?",
 "Why did {s} end up deciding to {e}?","What were {sp} reasons to {e}?","Do you know why {s} {ep}?",
 "Any idea what caused {s} to {e}?","What was {sp} motivation to {e}?","Why exactly did {s} {e}?","What drove {s} to {e}?",
 "What got {s} to {e} in the first place?","Why didn't {s} {e}?","Why would {s} want to {e}?","Why {was} {s} planning to {e}?",
 "Why {has} {s} decided to {e}?","What is the reason {s} {ep}?","What's the reason behind {s} deciding to {e}?",
 "What encouraged {s} to {e}?","What caused {s} to {e}?","Why did {s} choose to {e}?","Why did {s} want to {e}?",
 "What was the purpose of {sp} decision to {e}?","What did {s} hope to achieve when {he} {ep}?",
 "Why {does} {s} {h}?","What got {s} into {hg}?","Why did {s} start {hg}?",
 "What is the reason behind {sp} love of {hg}?","Why {is_} {s} so into {hg}?","How come {s} keeps {hg}?",
 "What made {s} stop {hg}?","What inspired {sp} interest in {hg}?","Why {does} {s} love {hg}?",
 "What motivates {s} to keep {hg}?","Why did {s} take up {hg}?","What draws {s} to {hg}?","Why {does} {s} find {hg} so rewarding?",
 "Why {was} {s} {f} {c}?","What made {s} feel {f} {c}?","What caused {s} to be {f} {c}?","Why did {s} seem {f} {c}?",
 "Explain why {s} {was} {f} {c}.","How come {s} felt {f} {c}?","What had {s} feeling {f} {c}?",
 "What caused {sp} {n}?","What is the reason behind {sp} {n}?","What led to {sp} {n}?","Where does {sp} {n} come from?",
 "What explains {sp} {n}?","What triggered {sp} {n}?","Why did {s} develop a {n}?","What sparked {sp} {n}?",
 "Why did {s} go to {l}?","What was the reason {s} skipped {l}?","Why did {s} leave {l} early?","What made {s} go to {l}?",
 "Why did {s} decide to try {a}?","What made {s} sign up for {a}?","Why did {s} give {pos} {r} a {t}?",
 "Why {does} {s} prefer {a}?","What reason did {s} give for skipping {pos} {v}?","Why was {sp} {v} cancelled?",
 "Why was {sp} {v} so special to {s}?","What made {sp} {v} memorable?","Why did {s} postpone {pos} {v}?",
 "Why did {s} and {pos} {r} argue?","Why {does} {s} admire {pos} {r}?","What motivated {sp} {r} to {e}?",
 "why did {s} {e}","What is {sp} reason for {hg}?","Why {is_} {s} thinking about {hg}?",
]
WHEN_T = [
 "When did {s} {e}?","What year did {s} {e}?","In which month did {s} {e}?","How long ago did {s} {e}?",
 "On what date did {s} {e}?","Around what time did {s} {e}?","When exactly did {s} {e}?","Do you remember when {s} {ep}?",
 "When was it that {s} {ep}?","In what season did {s} {e}?","Was it last year that {s} {ep}?","How many weeks ago did {s} {e}?",
 "When {is_} {s} planning to {e}?","What was the date when {s} {ep}?","How old was {s} when {he} {ep}?","Which weekend did {s} {e}?",
 "At what point did {s} {e}?","Did {s} {e} before or after the holidays?","When {is_} {s} going to {e}?","When will {s} {e}?",
 "Which year did {s} {e}?","In what year did {s} {e}?","What month did {s} {e}?","Which month was it when {s} {ep}?",
 "What day did {s} {e}?","On which day did {s} {e}?","When was the last time {s} {ep}?","When was the first time {s} {ep}?",
 "How many years ago did {s} {e}?","How many months ago did {s} {e}?","How long before {pos} {v} did {s} {e}?",
 "Did {s} {e} in {y} or {y2}?","Did {s} {e} in {mo}?","Was it in {mo} that {s} {ep}?","By when {does} {s} need to {e}?",
 "When did {s} last {e}?","Approximately when did {s} {e}?","Roughly when did {s} {e}?","When did {s} {e}, exactly?",
 "Can you tell me when {s} {ep}?","What time of year did {s} {e}?","How long did it take {s} to {e}?",
 "When did {s} end up deciding to {e}?","In which year was it that {s} {ep}?","What week did {s} {e}?",
 "when did {s} {e}","When did {s} first {e}?","When {has} {s} planned to {e}?",
 "How long {has} {s} been {hg}?","Since when {has} {s} been {hg}?","How many years {has} {s} been {hg}?",
 "When did {s} first start {hg}?","For how long {has} {s} been {hg}?","What day of the week {does} {s} usually {h}?",
 "How often {does} {s} {h}?","When did {s} give up {hg}?","How many months {has} {s} spent {hg}?","When did {s} start {hg}?",
 "How long did {s} keep {hg}?","What year did {s} begin {hg}?","At what age did {s} start {hg}?","When did {s} get into {hg}?",
 "How frequently {does} {s} {h}?","Since what year {has} {s} been {hg}?","How long ago did {s} start {hg}?",
 "When is {sp} {v}?","What was the date of {sp} {v}?","How long did {sp} {v} last?","When was {sp} {v}?",
 "Which came first, {sp} {v} or {pos} {v2}?","Did {sp} {v} happen before {pos} {v2}?","What happened first: {sp} {v} or the {v2}?",
 "How much time passed between {sp} {v} and {pos} {v2}?","How soon after {pos} {v} did {s} {e}?",
 "Was it before or after {pos} {v} that {s} {ep}?","How many days before {pos} {v} did {s} {e}?","What month is {sp} {v} in?",
 "In what year was {sp} {v}?","How long ago was {sp} {v}?","When is {sp} {v} scheduled?","What time did {sp} {v} start?",
 "When {was} {sp} {v} held?","What day of the week was {sp} {v}?","Which month was {sp} {v}?","When did {sp} {v} take place?",
 "When will {sp} {v} be?","How many days did {sp} {v} last?","How long after {pos} {v} was {pos} {v2}?",
 "When did {s} go to {l}?","When did {s} try {a}?","How long {has} {s} known {pos} {r}?","When did {s} meet {pos} {r}?",
 "When did {sp} {r} {e}?","When is {s} visiting {pos} {r}?","How long has it been since {s} {ep}?","What year was {s} born?",
 "How long {was} {s} {st}?","How long has {s} been {st}?","When did {s} stop being {st}?","Since when {has} {s} been {st}?",
 "How many years {was} {s} {st}?","For how long {was} {s} {st} before {he} {ep}?","When did {s} {e} {tw}?",
]
ENTITY_T = [
 "What is {sp} favourite {t}?","What's {sp} favorite {t}?","Which {t} {does} {s} like the most?","Does {s} have a favourite {t}?",
 "Which {t} did {s} mention loving?","What {t} did {s} recommend?","What kind of {t} {does} {s} enjoy?",
 "What is the name of {sp} {r}?","Who is {sp} {r}?","What does {sp} {r} do for work?","Where does {sp} {r} live?",
 "What did {s} buy for {pos} {r}?","What hobbies does {sp} {r} have?","What {does} {s} like to do with {pos} {r}?",
 "How old is {sp} {r}?","Does {s} get along with {pos} {r}?","What did {s} and {pos} {r} talk about?",
 "Who did {s} meet at {l}?","What did {s} buy at {l}?","Who went with {s} to {l}?","What did {s} see at {l}?",
 "Who did {s} run into at {l}?","What did {s} bring to {l}?","What did {s} learn at {l}?","How did {s} like {l}?",
 "Would {s} likely enjoy {a}?","{is_} {s} the kind of person who would like {a}?","Would {s} be interested in {a}?",
 "Has {s} ever tried {a}?","Who would {s} invite to {a}?","What would {s} think of {a}?","Would {s} prefer {a} or {a2}?",
 "Would {s} be likely to go to {a}?","Would {s} enjoy {a} with {pos} {r}?","Is {a} something {s} would enjoy?",
 "Where did {s} go after {he} {ep}?","Who helped {s} {e}?","What did {s} need in order to {e}?","Where did {s} {e}?",
 "Who did {s} tell first that {he} {ep}?","What did {s} do after {he} {ep}?","Which friend encouraged {s} to {e}?",
 "How did {s} feel after {he} {ep}?","Who was with {s} when {he} {ep}?","What did {s} learn when {he} {ep}?",
 "How many people came when {s} {ep}?","How many friends did {s} invite when {he} {ep}?","What happened when {s} {ep}?",
 "Who {does} {s} {h} with?","Where {does} {s} {h}?","What equipment {does} {s} need for {hg}?","{does} {s} enjoy {hg}?",
 "Which friends {does} {s} {h} with?","What {does} {s} say about {hg}?","{is_} {s} any good at {hg}?",
 "What {does} {s} like about {hg}?","How {does} {s} feel about {hg}?","What has {s} learned from {hg}?",
 "Where was {sp} {v} held?","Who attended {sp} {v}?","What gift did {s} get for {pos} {v}?","What did {s} wear to {pos} {v}?",
 "Who organised {sp} {v}?","What food was served at {sp} {v}?","How many guests came to {sp} {v}?","What did {s} do at {pos} {v}?",
 "What did {s} do {tw}?","Where did {s} go {tw}?","Who did {s} see {tw}?","What did {s} buy {tw}?","What did {s} cook {tw}?",
 "What did {s} and {pos} {r} do {tw}?","What was {s} reading {tw}?","How did {s} spend {tw}?",
 "What {does} {s} like?","What {does} {s} like to do on weekends?","What kind of music {does} {s} like?",
 "How many kids {does} {s} have?","How many pets {does} {s} have?","How many books has {s} read this year?",
 "How many times did {s} {e}?","How many countries has {s} visited?","How many instruments {does} {s} play?",
 "What activities {does} {s} do?","What activities has {s} done with {pos} {r}?","What {does} {s} do to relax?",
 "What kind of {t} {does} {s} like?","What type of {t} did {s} mention?","What are {sp} hobbies?",
 "What advice did {s} give {pos} {r}?","What did {s} say about {pos} {r}?","How {does} {s} describe {pos} {r}?",
 "What does {s} think about {hg}?","What might {s} do if {he} had a free weekend?","What could {s} do to relax?",
 "What personality traits might {s} have?","What career might {s} pursue?","What field would {s} likely study?",
 "Which city {does} {s} live in?","Where did {s} grow up?","Where did {s} and {other} meet?","What do {s} and {other} have in common?",
 "In what ways {does} {s} support {pos} {r}?","How did {s} help {pos} {r}?","How did {s} celebrate {pos} {v}?",
 "What did {s} paint?","What did {s} make for {pos} {r}?","What are {s} and {other} planning to do together?",
 "Who inspired {s}?","Who {does} {s} look up to?","What is {s} passionate about?","What is {s} proud of?",
 "What {does} {s} do for work?","Is {s} married?","{does} {s} have any pets?","What did {s} name {pos} dog?",
 "Based on what {s} said, what would {he} enjoy?","According to {s}, what is the best part of {hg}?",
 "what {does} {s} like to do","What is {sp} job?","What events has {s} attended?","What causes {does} {s} care about?",
 "What book did {s} read {tw}?","What did {s} make with {pos} {r}?","Which {t} did {s} talk about?",
 "What instrument {does} {s} play?","What did {s} do with {pos} {r} {tw}?","How {is_} {s} doing after {pos} {v}?",
 "What did {s} mention about {pos} {v} {tw}?","Which {t} did {s} recommend to {pos} {r} {tw}?",
 "What kind of {t} did {s} talk about {tw}?","Where did {s} go with {pos} {r} {tw}?","What happened to {sp} {v} {tw}?",
 "What did {s} share with {pos} {r} {tw}?","What problem did {s} run into {tw}?","What did {s} say about {hg} {tw}?",
 "What helps {s} {m}?","What does {s} do to {m}?","Which {t} helps {s} {m}?","Who helps {s} {m}?",
 "Who is {sp} biggest inspiration?","Which {t} inspires {s} the most?","What is {sp} main source of inspiration for {hg}?",
 "What does {sp} {t} remind {s} of?","What does {sp} tattoo symbolize?","What challenges did {s} face while {hg}?",
 "What was {sp} reaction to {pos} {v}?","How did {s} react when {pos} {r} {ep}?","What cause does {sp} {v} support?",
 "How does {s} feel about {sp} {r}'s new job?","What did {s} find while {hg}?","What keeps {s} busy these days?",
 "What goals does {s} have for {hg}?","What does {s} hope to achieve with {hg}?","What lesson did {s} learn from {pos} {v}?",
 "What is the biggest challenge {s} faced at {l}?","What kind of impact did {pos} {v} have on {s}?",
 "How has {sp} life changed since {he} {ep}?","What values {does} {s} want to pass on to {pos} kids?",
 "What did {s} find in {pos} old notebooks?","What is on {sp} desk for motivation?","What did {s} do to feel closer to {pos} {r}?",
 "What project {is_} {s} working on {tw}?","What did {s} and {other} talk about {tw}?","Which item does {s} treasure most?",
]

FIELDS = re.compile(r"\{(\w+)\}")


def render(tpl: str) -> str:
    s = subject()
    kw = dict(s)
    used = set(FIELDS.findall(tpl))
    if used & {"e", "ep"}:
        kw["e"], kw["ep"] = rng.choice(EVENTS)
    if used & {"h", "hg"}:
        kw["h"], kw["hg"] = rng.choice(HABITS)
    kw["v"], kw["v2"] = rng.sample(EVENT_NOUNS, 2)
    kw["a"], kw["a2"] = rng.sample(ACTIVITIES, 2)
    kw["y"], kw["y2"] = rng.sample(YEARS, 2)
    kw.update(st=rng.choice(STATES), m=rng.choice(MOTIVE), t=rng.choice(THINGS), l=rng.choice(PLACES), r=rng.choice(RELS), f=rng.choice(FEELINGS),
              c=rng.choice(CONTEXTS), n=rng.choice(NOUNS_WHY), tw=rng.choice(TIMEWORDS), mo=rng.choice(MONTHS))
    q = tpl.format(**kw).format(pos=s["pos"])  # fillers may hold {pos}
    q = re.sub(r"\s+", " ", q).strip()
    q = q[0].upper() + q[1:] if tpl[0].isupper() else q  # lower-case templates stay lower-case
    return q


def gen(templates: list[str], label: str, per_template: int) -> list[dict]:
    rows = []
    for i, t in enumerate(templates):
        seen = set()
        for _ in range(per_template * 3):  # retries: a template can repeat itself
            q = render(t)
            if q.lower() not in seen:
                seen.add(q.lower())
                rows.append({"question": q, "intent": label, "group": f"tpl:{label}:{i}"})
            if len(seen) == per_template:
                break
    return rows

HAND = {"WHY": [
 "Why did Sam and Jo stop talking for a while?", "What made the trip to Italy so stressful for Maria?",
 "Why didn't Tom go to his cousin's wedding?", "What led to the big argument at Thanksgiving?",
 "What was the reason for the move?", "How come Nina never mentions her brother anymore?",
 "Why is Leo thinking about leaving the city?", "What caused the tension between Ana and her landlord?",
 "Why did the camping trip get called off?", "What made Priya change her mind about having kids?",
 "Why does Marcus refuse to fly?", "What motivated Chloe to run for the school board?",
 "Why did Dev feel left out at the party?", "What's the story behind Omar's new tattoo?",
 "Why did Hannah pick that particular college?", "What was the reason Caleb's band broke up?",
 "Why do Yuki and her mom argue so much?", "What pushed Rafael over the edge at work?",
 "Why would Bea turn down such a good offer?", "What explains Elliot's sudden interest in birds?",
 "Why did Grace name her cat after a poet?", "Did Jamal quit because of his manager?",
 "Was Ines's move motivated by the new job?", "Is stress the reason Kofi stopped sleeping well?",
 "Did Lena start therapy because of the breakup?", "Why did Mateo decide against buying the house?",
 "What's the reasoning behind Zoe going vegan?", "Why was the wedding postponed?",
 "Why did they sell the cabin?", "What caused the delay in Arjun's graduation?",
 "Explain what drove Fatima to start her own business.", "Why does Noah always visit his grandmother on Sundays?",
 "What made the dog so anxious after the move?", "How come the bakery closed so suddenly?",
 "What reasons did Sam give for skipping the reunion?", "Why did Maria feel she needed a break from social media?",
 "What made Jo so sure she wanted to become a teacher?", "Why was Tom so quiet during dinner?",
 "What's the motivation behind Ana's marathon training?", "Why did Leo apologise to his sister?",
 "What drove Priya to move back home?", "Why is Marcus learning sign language?",
 "For what reason did Chloe switch teams?", "What was it that convinced Dev to adopt?",
 "What made Nina fall in love with pottery?", "Why did Omar's parents disapprove of the trip?",
 "How come Hannah started painting again?", "What was behind the fight between Caleb and his roommate?",
 "Why does Yuki get nervous before presentations?", "What sparked Rafael's passion for cooking?",
 "Why was Bea crying after the phone call?", "What led Elliot and Grace to break up?",
 "Why did Jamal get into trouble at school?", "Why did Ines give away her piano?",
 "What inspired the name of Kofi's podcast?", "Why did Lena's friends throw her a surprise party?",
 "What caused Mateo to miss his flight?", "Why did Zoe decide to homeschool her kids?",
 "What made Arjun want to learn the violin as an adult?", "Why has Fatima been avoiding her coworkers?",
 "Why did Noah feel guilty about the gift?", "What was the purpose of Sam's trip to Chicago?",
 "Why did Maria choose a rescue dog instead of a puppy?", "Why is Jo saving up money?",
 "What reason did Tom have for changing his number?", "Why does Ana prefer working nights?",
 "What made Leo so proud of his daughter?", "Why did Priya feel the need to apologise?",
 "What was the main reason Marcus took the job in Denver?", "Why did Chloe stop playing tennis?",
], "WHEN": [
 "When did Sam and Jo first meet?", "What year did Maria graduate from college?",
 "How long have Tom and Ana been married?", "When is the next book club meeting?",
 "Which happened first, the wedding or the move?", "How long ago did Leo lose his dog?",
 "When does Priya's new job start?", "What month was the concert?",
 "How many years did Marcus live in Berlin?", "When was the last time Chloe saw her brother?",
 "Was Dev's promotion before his vacation?", "When did Nina get her driver's license?",
 "How long did Omar stay in the hospital?", "When will Hannah finish her degree?",
 "What day is Caleb's birthday?", "When did Yuki adopt her second cat?",
 "How many months has Rafael been sober?", "When did the kids start school this year?",
 "What year did Bea's grandmother pass away?", "How long did it take Elliot to write his first novel?",
 "When did Grace and Jamal get engaged?", "Did Ines move before or after she started the new job?",
 "How long has Kofi known Lena?", "When was the photo at the lake taken?",
 "Around when did Mateo start feeling better?", "What was the date of the charity run?",
 "When did Zoe's parents visit her?", "How many days was Arjun's trip to Peru?",
 "When is Fatima due?", "Since what year has Noah been coaching?",
 "What time did the party end?", "Which came first, Sam's new job or his move to Austin?",
 "How much time passed between the breakup and the new relationship?", "In which year did Maria start her blog?",
 "When did the family get the puppy?", "What date is the wedding set for?",
 "When was Tom's last doctor's appointment?", "Is Ana's recital this Saturday or next?",
 "How many weeks until Leo's vacation?", "When did Priya last go hiking?",
 "How long has it been since Marcus quit smoking?", "When did Chloe finish her first painting?",
 "At what age did Dev learn to ride a bike?", "What was the first thing that happened after Nina arrived in Tokyo?",
 "When did Omar and Hannah go to the beach?", "How recently did Caleb see his therapist?",
 "What was the order of events at Yuki's graduation weekend?", "When did Rafael start his sourdough starter?",
 "In what decade did Bea's parents emigrate?", "When was Elliot's first gig with the band?",
 "How long is Grace's commute to work?", "When did Jamal's flight land?",
 "Did Ines finish the marathon before she turned thirty?", "When does Kofi usually go running?",
 "What time of year does Lena visit her family?", "How long was Mateo unemployed?",
 "When did Zoe first mention wanting to move?", "Which day did Arjun get the results back?",
 "Was the concert in the spring or the fall?", "When did Noah come back from his trip?",
 "How old was Sam when he moved out?", "What was the last event Maria attended before the pandemic?",
 "When did the argument between Jo and Tom happen?", "How many times has Ana been to Mexico, and when was the latest?",
 "When did Leo's band release their first album?", "How long before the wedding did Priya buy her dress?",
 "When was the first time Marcus went camping?", "What year did Chloe open her studio?",
 "What happened the weekend before Dev's birthday?", "When did Nina start volunteering at the shelter?",
], "ENTITY": [
 "What is Maria's favourite book?", "Who did Ann meet at the conference?", "What does Tom do on weekends?",
 "Where did Sam and Jo go for their anniversary?", "Which restaurant did Leo recommend?",
 "Would Bea likely enjoy hiking?", "What did Priya get her mom for Mother's Day?",
 "Who is Marcus's best friend?", "What color is Chloe's car?", "What's the name of Dev's band?",
 "Does Nina have a garden?", "What kind of dog does Omar have?", "Who gave Hannah the necklace?",
 "What did Caleb order at the cafe?", "What is Yuki's sister's name?", "Where does Rafael go running?",
 "What are the names of Bea's kids?", "Which instrument did Elliot learn first?",
 "What does Grace think about remote work?", "What is Jamal's opinion on social media?",
 "What did Ines paint for the exhibition?", "Who is Kofi's roommate?", "Which books are on Lena's reading list?",
 "What is Mateo allergic to?", "What kind of house does Zoe want to buy?", "Who does Arjun live with?",
 "What is Fatima's role at the hospital?", "What did Noah make for dinner?",
 "Would Sam be more likely to choose a beach or a mountain holiday?", "What does Maria's husband do?",
 "Is Jo vegetarian?", "Which concert did Tom go to?", "What is Ana's shoe size?",
 "What souvenirs did Leo bring back from Peru?", "Who was at Priya's birthday dinner?",
 "What kind of business does Marcus run?", "Where did Chloe buy her bike?",
 "What is Dev's favourite thing about his new apartment?", "What board games does Nina own?",
 "Where did Omar learn to surf?", "What charity does Hannah support?", "Who are Caleb's neighbours?",
 "What kind of plants does Yuki grow?", "What is Rafael's favourite dish to cook?",
 "Which friend lent Bea the tent?", "What did Elliot write his thesis on?", "How many siblings does Grace have?",
 "What is Jamal's dog's breed?", "What did Ines and Kofi talk about at lunch?", "What does Lena keep on her desk?",
 "What did Mateo win at the raffle?", "What language is Zoe learning?", "What did Arjun think of the movie?",
 "What kind of tea does Fatima drink?", "Who is Noah's hero?", "What did the kids dress up as for Halloween?",
 "What does Sam like about his job?", "Which neighbourhood does Maria live in?", "What did Jo say about the new manager?",
 "Would Tom probably prefer a quiet night in or a party?", "What kind of support does Ana get from her family?",
 "Which brand of guitar does Leo play?", "What is Priya's go-to karaoke song?",
 "What kind of exercise does Marcus do?", "Who did Chloe go to the museum with?",
 "What items did Dev pack for the camping trip?", "What is Nina's biggest goal this year?",
 "Which parks does Omar take his dog to?", "What did Hannah learn at the workshop?",
 "Is Caleb more of a morning person or a night owl?", "What flavours of ice cream does Yuki like?",
], }



def main(path: str, per_class: int = 1500) -> None:
    rows = []
    for label, templates in (("WHY", WHY_T), ("WHEN", WHEN_T), ("ENTITY", ENTITY_T)):
        hand = [{"question": q, "intent": label, "group": f"hand:{label}:{i}"} for i, q in enumerate(HAND[label])]
        per_template = -(-(per_class - len(hand)) // len(templates))
        rows += hand + gen(templates, label, per_template)[: per_class - len(hand)]
    seen = {}
    out = []
    for r in rows:  # a question keeps its first label; no question carries two
        k = r["question"].lower()
        if k in seen:
            assert seen[k] == r["intent"], r
            continue
        seen[k] = r["intent"]
        out.append(r)
    rng.shuffle(out)
    with open(path, "w") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = {lab: sum(r["intent"] == lab for r in out) for lab in HAND}
    print(f"{len(out)} rows {counts}, {len({r['group'] for r in out})} groups -> {path}")


if __name__ == "__main__":
    main(sys.argv[1])
