"""Generate magma_torch/query/data/intent_questions.jsonl (templates x fillers + hand-written)."""
import json, random, re, sys

rng = random.Random(13)
PEOPLE = [("Sam","m"),("Maria","f"),("Jo","f"),("Tom","m"),("Ana","f"),("Leo","m"),("Priya","f"),
          ("Marcus","m"),("Chloe","f"),("Dev","m"),("Nina","f"),("Omar","m"),("Hannah","f"),("Caleb","m"),
          ("Yuki","f"),("Rafael","m"),("Bea","f"),("Elliot","m"),("Grace","f"),("Jamal","m"),("Ines","f"),
          ("Kofi","m"),("Lena","f"),("Mateo","m"),("Zoe","f"),("Arjun","m"),("Fatima","f"),("Noah","m")]
PRON = {"m": ("he","his","him"), "f": ("she","her","her")}

# one-off events: (base, past)
EVENTS = [
 ("quit {pos} job","quit {pos} job"), ("move to Portland","moved to Portland"), ("adopt a cat","adopted a cat"),
 ("start a pottery class","started a pottery class"), ("sell {pos} car","sold {pos} car"),
 ("break up with {pos} boyfriend","broke up with {pos} boyfriend"), ("go back to school","went back to school"),
 ("run {pos} first marathon","ran {pos} first marathon"), ("visit {pos} grandparents in Ohio","visited {pos} grandparents in Ohio"),
 ("get a tattoo","got a tattoo"), ("open a bakery","opened a bakery"), ("cancel the trip to Japan","cancelled the trip to Japan"),
 ("switch to night shifts","switched to night shifts"), ("join a choir","joined a choir"), ("buy a house","bought a house"),
 ("take up rock climbing","took up rock climbing"), ("change majors","changed majors"), ("get engaged","got engaged"),
 ("start a podcast","started a podcast"), ("delete {pos} social media accounts","deleted {pos} social media accounts"),
 ("move in with {pos} partner","moved in with {pos} partner"), ("stop eating meat","stopped eating meat"),
 ("apply for the promotion","applied for the promotion"), ("repaint the living room","repainted the living room"),
 ("begin therapy","began therapy"), ("reconnect with {pos} father","reconnected with {pos} father"),
 ("leave the band","left the band"), ("launch an Etsy shop","launched an Etsy shop"), ("take a gap year","took a gap year"),
 ("sign up for the half marathon","signed up for the half marathon"), ("start journaling","started journaling"),
 ("adopt a rescue dog","adopted a rescue dog"), ("fly to Lisbon","flew to Lisbon"), ("switch careers","switched careers"),
 ("drop out of the cooking course","dropped out of the cooking course"), ("host a game night","hosted a game night"),
 ("learn to swim","learned to swim"), ("sell the family cabin","sold the family cabin"),
 ("start a vegetable garden","started a vegetable garden"), ("skip the reunion","skipped the reunion"),
 ("go on a solo road trip","went on a solo road trip"), ("start therapy sessions","started therapy sessions"),
 ("buy a new camera","bought a new camera"), ("turn down the job offer","turned down the job offer"),
 ("enroll in night classes","enrolled in night classes"), ("get a second dog","got a second dog"),
]
# ongoing habits: (base, gerund)
HABITS = [
 ("play guitar","playing guitar"), ("live in Boston","living in Boston"), ("work as a nurse","working as a nurse"),
 ("learn Japanese","learning Japanese"), ("volunteer at the food bank","volunteering at the food bank"),
 ("run every morning","running every morning"), ("paint landscapes","painting landscapes"), ("teach yoga","teaching yoga"),
 ("write {pos} novel","writing {pos} novel"), ("collect vinyl records","collecting vinyl records"),
 ("coach {pos} son's soccer team","coaching {pos} son's soccer team"), ("knit","knitting"),
 ("bake sourdough","baking sourdough"), ("go to the climbing gym","going to the climbing gym"),
 ("study for the bar exam","studying for the bar exam"), ("foster kittens","fostering kittens"),
 ("play in a jazz band","playing in a jazz band"), ("mentor new hires","mentoring new hires"),
 ("meditate","meditating"), ("practise calligraphy","practising calligraphy"),
]
FEELINGS = ["upset","nervous","excited","disappointed","frustrated","so happy","relieved","anxious","embarrassed","proud","annoyed","heartbroken"]
CONTEXTS = ["after the dinner party","about the job interview","during the trip","at the wedding","about {pos} sister's visit",
            "last week","on {pos} birthday","after talking to {pos} mom","about the move","with {pos} roommate",
            "after the concert","about the test results","at work yesterday","about the adoption"]
NOUNS_WHY = ["breakup","career change","injury","stress at work","falling out with {pos} sister","sudden move",
             "decision to go vegan","change of heart about the wedding","bad mood","interest in astronomy",
             "love of hiking","fear of flying","burnout","argument with {pos} neighbour","passion for photography"]
EVENT_NOUNS = ["birthday","wedding","graduation","piano recital","move to Denver","first marathon","trip to Japan",
               "job interview","knee surgery","housewarming party","promotion","engagement","art exhibition",
               "camping trip","sister's baby shower","first date with Alex","book club meeting","dog's adoption",
               "visit to the Grand Canyon","retirement party"]
THINGS = ["book","movie","food","band","colour","hiking trail","board game","TV show","restaurant","song",
          "dessert","season","sport","podcast","city","painter","video game","flower","coffee order","author"]
RELS = ["sister","brother","mom","dad","partner","best friend","boss","roommate","grandmother","son","daughter","coworker","uncle","fiancé"]
PLACES = ["the conference","the farmers market","the wedding","the gym","the book club","yoga class","the concert",
          "the beach party","the charity run","the museum","the pottery workshop","the airport","the dog park"]
ACTIVITIES = ["hiking","a jazz concert","camping","a cooking class","a board game night","a pottery workshop",
              "a long road trip","a yoga retreat","a science fiction novel","a museum visit","surfing lessons",
              "a wine tasting","a karaoke night","birdwatching","a baking competition"]

def fill(_tpl, p, g, **kw):
    he, his, him = PRON[g]
    s = _tpl.format(p=p, pron=he, pos=his, obj=him, **kw)
    s = s.format(pos=his, pron=he, obj=him)  # fillers may contain {pos}
    s = re.sub(r"\s+", " ", s).strip()
    return s[0].upper() + s[1:]

WHY_T = [
 ("Why did {p} {e}?","E"),("What made {p} {e}?","E"),("What led {p} to {e}?","E"),("What motivated {p} to {e}?","E"),
 ("For what reason did {p} {e}?","E"),("What was the reason {p} decided to {e}?","E"),("How come {p} decided to {e}?","E"),
 ("Explain why {p} chose to {e}.","E"),("What inspired {p} to {e}?","E"),("What prompted {p} to {e}?","E"),
 ("What pushed {p} to {e}?","E"),("What was behind {p}'s decision to {e}?","E"),("Can you tell me why {p} wanted to {e}?","E"),
 ("What convinced {p} to {e}?","E"),("Why did {p} end up deciding to {e}?","E"),("What were {p}'s reasons to {e}?","E"),
 ("Do you know why {p} {ep}?","E"),("Any idea what caused {p} to {e}?","E"),("What was {p}'s motivation to {e}?","E"),
 ("Why exactly did {p} {e}?","E"),("What drove {p} to {e}?","E"),("What got {p} to {e} in the first place?","E"),
 ("Why does {p} {h}?","H"),("What got {p} into {hg}?","H"),("What keeps {p} motivated to {h}?","H"),
 ("Why did {p} start {hg}?","H"),("What is the reason {p} enjoys {hg}?","H"),("Why is {p} so into {hg}?","H"),
 ("How come {p} keeps {hg}?","H"),("What made {p} stop {hg}?","H"),("What inspired {p}'s interest in {hg}?","H"),
 ("Why was {p} {f} {c}?","F"),("What made {p} feel {f} {c}?","F"),("What caused {p} to be {f} {c}?","F"),
 ("Why did {p} seem {f} {c}?","F"),("Explain why {p} was {f} {c}.","F"),
 ("What caused {p}'s {n}?","N"),("What is the reason behind {p}'s {n}?","N"),("What led to {p}'s {n}?","N"),
 ("Where does {p}'s {n} come from?","N"),("What explains {p}'s {n}?","N"),("What triggered {p}'s {n}?","N"),
]
WHEN_T = [
 ("When did {p} {e}?","E"),("What year did {p} {e}?","E"),("In which month did {p} {e}?","E"),("How long ago did {p} {e}?","E"),
 ("On what date did {p} {e}?","E"),("Around what time did {p} {e}?","E"),("When exactly did {p} {e}?","E"),
 ("Do you remember when {p} {ep}?","E"),("When was it that {p} {ep}?","E"),("In what season did {p} {e}?","E"),
 ("Was it last year that {p} {ep}?","E"),("How many weeks ago did {p} {e}?","E"),("When is {p} planning to {e}?","E"),
 ("What was the date when {p} {ep}?","E"),("How old was {p} when {pron} {ep}?","E"),("Which weekend did {p} {e}?","E"),
 ("At what point did {p} {e}?","E"),("Did {p} {e} before or after the holidays?","E"),
 ("How long has {p} been {hg}?","H"),("Since when has {p} been {hg}?","H"),("How many years has {p} been {hg}?","H"),
 ("When did {p} first start {hg}?","H"),("For how long has {p} been {hg}?","H"),("What day of the week does {p} usually {h}?","H"),
 ("How often does {p} {h}?","H"),("When did {p} give up {hg}?","H"),("How many months has {p} spent {hg}?","H"),
 ("When is {p}'s {v}?","V"),("What was the date of {p}'s {v}?","V"),("How long did {p}'s {v} last?","V"),
 ("Which came first, {p}'s {v} or {pos} {v2}?","VV"),("Did {p}'s {v} happen before {pos} {v2}?","VV"),
 ("What happened first: {p}'s {v} or the {v2}?","VV"),("How much time passed between {p}'s {v} and {pos} {v2}?","VV"),
 ("How soon after {pos} {v} did {p} {e}?","VE"),("Was it before or after {pos} {v} that {p} {ep}?","VE"),
 ("How many days before {pos} {v} did {p} {e}?","VE"),("What month is {p}'s {v} in?","V"),("In what year was {p}'s {v}?","V"),
 ("How long ago was {p}'s {v}?","V"),("When is {p}'s {v} scheduled?","V"),("What time did {p}'s {v} start?","V"),
]
ENTITY_T = [
 ("What is {p}'s favourite {t}?","T"),("What's {p}'s favorite {t}?","T"),("Which {t} does {p} like the most?","T"),
 ("Does {p} have a favourite {t}?","T"),("Which {t} did {p} mention loving?","T"),
 ("What is the name of {p}'s {r}?","R"),("Who is {p}'s {r}?","R"),("What does {p}'s {r} do for work?","R"),
 ("Where does {p}'s {r} live?","R"),("What did {p} buy for {pos} {r}?","R"),("What hobbies does {p}'s {r} have?","R"),
 ("What does {p} like to do with {pos} {r}?","R"),("How old is {p}'s {r}?","R"),("Does {p} get along with {pos} {r}?","R"),
 ("Who did {p} meet at {l}?","L"),("What did {p} buy at {l}?","L"),("Who went with {p} to {l}?","L"),("What did {p} see at {l}?","L"),
 ("Who did {p} run into at {l}?","L"),("What did {p} bring to {l}?","L"),
 ("Would {p} likely enjoy {a}?","A"),("Is {p} the kind of person who would like {a}?","A"),("Would {p} be interested in {a}?","A"),
 ("Has {p} ever tried {a}?","A"),("Who would {p} invite to {a}?","A"),("What would {p} think of {a}?","A"),
 ("Where did {p} go after {pron} {ep}?","E"),("Who helped {p} {e}?","E"),("What did {p} need in order to {e}?","E"),
 ("Where did {p} {e}?","E"),("Who did {p} tell first that {pron} {ep}?","E"),("What did {p} do after {pron} {ep}?","E"),
 ("Which friend encouraged {p} to {e}?","E"),("How did {p} feel after {pron} {ep}?","E"),("Who was with {p} when {pron} {ep}?","E"),
 ("What instrument does {p} use when {pron} {hg2}?","H"),("Who does {p} {h} with?","H"),("Where does {p} {h}?","H"),
 ("What equipment does {p} need for {hg}?","H"),("Does {p} enjoy {hg}?","H"),("Which friends does {p} {h} with?","H"),
 ("What does {p} say about {hg}?","H"),("Is {p} any good at {hg}?","H"),
 ("Where was {p}'s {v} held?","V"),("Who attended {p}'s {v}?","V"),("What gift did {p} get for {pos} {v}?","V"),
 ("What did {p} wear to {pos} {v}?","V"),("Who organised {p}'s {v}?","V"),("What food was served at {p}'s {v}?","V"),
]
SIMPLE_ENTITY = [
 "Where does {p} work?","Where does {p} live?","What does {p} do for a living?","What instruments does {p} play?",
 "What languages does {p} speak?","How many kids does {p} have?","Does {p} have any pets?","What kind of car does {p} drive?",
 "What sports does {p} play?","Is {p} allergic to anything?","Does {p} have any siblings?","What did {p} study in college?",
 "What is {p}'s job title?","Which city did {p} grow up in?","What breed is {p}'s dog?","What is {p}'s dog called?",
 "What books has {p} read recently?","Where did {p} go last summer?","What did {p} cook for the potluck?",
 "What are {p}'s hobbies?","Which countries has {p} visited?","What kind of music does {p} listen to?",
 "Who is {p} dating?","What genre of books does {p} prefer?","What is {p}'s middle name?","What did {p} name the new puppy?",
 "Which team does {p} support?","Where did {p} go on vacation this year?","What does {p} usually eat for breakfast?",
 "What is {p} afraid of?","What personality traits does {p} have?","Is {p} an introvert or an extrovert?",
 "What does {p} do to relax?","Who are {p}'s closest friends?","What school does {p}'s daughter attend?",
 "What was {p}'s first job?","Which apps does {p} use to stay organised?","What is {p}'s dream travel destination?",
 "Which podcast did {p} recommend?","What kind of cake did {p} bake?","Does {p} prefer cats or dogs?",
 "What projects is {p} working on?","What brand of running shoes does {p} wear?","Who taught {p} to cook?",
 "What did {p} get for {pos} birthday?","Where did {p} and {q} meet?","What do {p} and {q} have in common?",
 "What activities have {p} and {q} done together?","What games do {p} and {q} play together?",
 "Would {p} be considered a good cook?","What car did {p} end up buying?","What kind of art does {p} make?",
 "Which museum did {p} visit in Paris?","What does {p} collect?","What volunteer work does {p} do?",
 "Who is {p}'s favourite author?","Is {p} religious?","What pets did {p} have as a kid?","What is {p} studying right now?",
]

def pick_e(): return rng.choice(EVENTS)
def pick_h(): return rng.choice(HABITS)

def render(t, kind):
    p, g = rng.choice(PEOPLE)
    kw = {}
    if "E" in kind:
        e, ep = pick_e(); kw.update(e=e, ep=ep)
    if kind == "H":
        h, hg = pick_h(); kw.update(h=h, hg=hg, hg2=hg)
    if kind == "F": kw.update(f=rng.choice(FEELINGS), c=rng.choice(CONTEXTS))
    if kind == "N": kw.update(n=rng.choice(NOUNS_WHY))
    if "V" in kind:
        v, v2 = rng.sample(EVENT_NOUNS, 2); kw.update(v=v, v2=v2)
    if kind == "T": kw["t"] = rng.choice(THINGS)
    if kind == "R": kw["r"] = rng.choice(RELS)
    if kind == "L": kw["l"] = rng.choice(PLACES)
    if kind == "A": kw["a"] = rng.choice(ACTIVITIES)
    q = rng.choice([x for x, _ in PEOPLE if x != p])
    return fill(t, p, g, q=q, **kw)

def gen(templates, per_template):
    out = []
    for t, kind in templates:
        for _ in range(per_template):
            out.append(render(t, kind))
    return out

def gen_simple(templates, n):
    out = []
    for t in templates:
        for _ in range(n):
            out.append(render(t, ""))
    return out

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

random.seed(0)
why = gen(WHY_T, 6) + HAND["WHY"]
when = gen(WHEN_T, 6) + HAND["WHEN"]
ent = gen(ENTITY_T, 4) + gen_simple(SIMPLE_ENTITY, 2) + HAND["ENTITY"]

def dedup(xs):
    seen, out = set(), []
    for x in xs:
        k = x.lower()
        if k not in seen:
            seen.add(k); out.append(x)
    return out

data = {"WHY": dedup(why), "WHEN": dedup(when), "ENTITY": dedup(ent)}
n = min(len(v) for v in data.values())
cap = min(n, 300)
rows = []
for lab, qs in data.items():
    hand = set(HAND[lab])
    # keep every hand-written item; fill the rest of the quota with template items
    keep = [q for q in qs if q in hand]
    rest = [q for q in qs if q not in hand]
    rng.shuffle(rest)
    keep += rest[: cap - len(keep)]
    rows += [{"question": q, "intent": lab} for q in keep]
rng.shuffle(rows)
# a question must not carry two labels
seen = {}
for r in rows:
    assert seen.setdefault(r["question"].lower(), r["intent"]) == r["intent"], r
with open(sys.argv[1], "w") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
print({k: len(v) for k, v in data.items()}, "cap", cap, "rows", len(rows))
